// The kit's Malloy runner (reference/endpoint.md): one long-lived process per package,
// speaking JSON lines.
//
// Each stdin line is one request {id, op, ...}; each answer is one stdout line {id, ok, result} or
// {id, ok: false, error, problems}. Requests are handled strictly one at a time, because every
// request changes the process's working directory into the package (DuckDB's sandbox checks
// relative table paths against the cwd). Nothing else is ever written to stdout.
//
// Ops: load {package_dir, allow, options: {csv_types, memory_limit, model_cache}}, reload, describe, definitions, search
// {text, limit, kinds, sources}, entities, model_info {model_path}, execute {model_path, query | source_name +
// query_name | query_name, givens, trusted, row_limit, timeout_ms, byte_cap, variant, vary}, csv_tables,
// field_sites, ping; and
// interrupt {target}, which is not queued behind the request it names and gets no answer: the
// running execute whose id is `target` stops (inside DuckDB) and answers `query-interrupted`.
//
// Budgets (reference/query-budgets.md): a submitted query's rows are capped hard (its own `limit:`
// cannot raise the cap; trusted queries keep their own limit), the rows it materialises are capped
// in bytes and DuckDB's memory is capped, and a query still running at `timeout_ms` is interrupted.
// A query stuck in the compiler cannot be interrupted from here: the Python driver kills the
// process a little after the same deadline.
//
// Compiling is paid once (reference/endpoint.md, "Compiled once"): a package's compiled models are
// written to the folder `model_cache` names, keyed by everything the compile read, so the next
// runner of the same package (a second runner of a pool, a replacement, another process) reads
// them instead of compiling; and each runner keeps the queries it compiled, keyed by their text,
// givens and mode, so a query asked again goes straight to DuckDB.

import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync, fstatSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, statSync, unlinkSync,
  writeSync, constants as fsConstants,
} from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import lunr from 'lunr';
import { API, CacheManager, Result, SingleConnectionRuntime, modelDefToModelInfo } from '@malloydata/malloy';
import { DuckDBConnection } from '@malloydata/db-duckdb';

const DEFAULT_ROW_LIMIT = 1000; // the Publisher's PUBLISHER_DEFAULT_QUERY_ROW_LIMIT
const DEFAULT_BYTE_CAP = 16 * 1024 * 1024; // JSON characters of rows one query may materialise
const DEFAULT_MEMORY_LIMIT = '1GB'; // DuckDB's own working memory, per runner
const SEARCH_DEFAULT_LIMIT = 10;
// Kinds the Publisher indexes for lexical retrieval; joins are kept for the typed form only.
const INDEXED_KINDS = new Set(['source', 'view', 'query', 'dimension', 'measure']);
const QUERY_CACHE_SIZE = 256; // compiled queries a runner keeps (least recently used dropped)
const MODEL_CACHE_ENTRIES = 32; // compiled packages the model cache folder keeps (oldest dropped)
const MODEL_CACHE_MAX_CHARS = 256 * 1024 * 1024; // a compiled package larger than this is not kept

let state = null; // {pkgDir, allow, conn, runtime, models: Map(path -> {mm, model, info, error})...}
let running = null; // the execute in progress: {id, withdrawn, stop} (the interrupt op reads it)
let withdrawnEarly = null; // the id of an execute withdrawn before it started (lines read together)

// ---------- helpers ----------

/** Every .malloy file under dir, as package-relative paths with forward slashes, sorted. */
async function findModels(dir, rel = '') {
  const out = [];
  const entries = await readdir(path.join(dir, rel), { withFileTypes: true });
  for (const e of entries) {
    if (e.name.startsWith('.') || e.name === 'node_modules') continue;
    const child = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await findModels(dir, child)));
    else if (e.isFile() && e.name.endsWith('.malloy')) out.push(child);
  }
  return out.sort();
}

/** The `#(doc)` text of a list of stable annotations ('' when none). */
function docText(annotations) {
  const docs = [];
  for (const a of annotations || []) {
    const v = String(a.value || '');
    const m = v.match(/^#\(doc\)\s?([\s\S]*)$/);
    if (m) docs.push(m[1].trim());
  }
  return docs.join(' ').trim();
}

/** Publisher's entity doc: `#(doc)` text, else the raw annotation lines (compiler tags left out). */
function entityDoc(annotations) {
  const doc = docText(annotations);
  if (doc) return doc;
  return (annotations || [])
    .map((a) => String(a.value || '').trim())
    .filter((v) => v && !v.startsWith('#(malloy)'))
    .join(' ');
}

function typeName(type) {
  if (!type || !type.kind) return null;
  return String(type.kind).replace(/_type$/, '');
}

/** JSON with BigInt made plain: a safe integer as a number, anything larger as its decimal text. */
function toJson(value) {
  return JSON.stringify(value, (_k, v) => {
    if (typeof v === 'bigint') {
      return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
    }
    if (v instanceof Uint8Array) return Buffer.from(v).toString('base64');
    return v;
  });
}

function problemList(err) {
  const problems = Array.isArray(err && err.problems) ? err.problems : [];
  return problems.map((p) => ({
    message: p.message,
    severity: p.severity,
    code: p.code,
    at: p.at ? { url: p.at.url, line: p.at.range?.start?.line, character: p.at.range?.start?.character } : undefined,
  }));
}

class RequestError extends Error {}

/** A query over its time or size budget: the query's failure, reported like a compile error. */
class BudgetError extends Error {
  constructor(message, code) {
    super(message);
    this.problems = [{ message, severity: 'error', code }];
  }
}

function sqlString(text) {
  return "'" + String(text).replace(/'/g, "''") + "'";
}

function sqlIdent(text) {
  return '"' + String(text).replace(/"/g, '""') + '"';
}

function modelEntry(modelPath) {
  if (!state) throw new RequestError('no package loaded');
  let p = modelPath;
  if (!p) {
    if (state.models.size !== 1) throw new RequestError('modelPath is required: the package has several models');
    p = [...state.models.keys()][0];
  }
  p = String(p).replace(/^\.\//, '');
  const entry = state.models.get(p);
  if (!entry) {
    const known = [...state.models.keys()].join(', ');
    throw new RequestError(`model '${p}' not found in package; models: ${known || '(none)'}`);
  }
  if (entry.error) throw Object.assign(new RequestError(`model '${p}' failed to compile: ${entry.error}`), { problems: entry.problems });
  return [p, entry];
}

// ---------- the compiled-model cache ----------
//
// A compiled package is kept as JSON in the cache folder, one file per key. The key is a sha256
// over what the compile read or depends on: this runner's own code and the pinned Node packages
// (Malloy and DuckDB), the package folder and the folders DuckDB may read, each .malloy file's
// bytes (the model digest), and every other file there by size, times and inode (a table whose
// file changes can change the schema the compile read). A cached model is handed to Malloy's own
// model cache (CacheManager), which checks again that each model file still hashes to what was
// compiled; anything unexpected (an unreadable, foreign or malformed file) is a miss: compiled as
// before. The folder must be the user's own and closed to others, as must each file in it.

class RecordingModelCache {
  constructor() {
    this.models = new Map(); // url -> {modelDef, invalidationKeys}
    this.compiled = 0; // models Malloy compiled (rather than read) in this load
    this.priming = false;
  }

  async getModel(url) {
    return this.models.get(url.toString());
  }

  async setModel(url, cachedModel) {
    this.models.set(url.toString(), cachedModel);
    if (!this.priming) this.compiled += 1;
    return true;
  }
}

const RUNNER_DIR = path.dirname(fileURLToPath(import.meta.url));
let codeDigest = null; // this runner's code and its pinned packages, read once

function runnerCodeDigest() {
  if (codeDigest === null) {
    const h = createHash('sha256');
    for (const name of ['runner.mjs', 'package-lock.json']) {
      try {
        h.update(name + '\0').update(readFileSync(path.join(RUNNER_DIR, name))).update('\0');
      } catch {
        h.update(name + '\0missing\0');
      }
    }
    codeDigest = h.digest('hex');
  }
  return codeDigest;
}

/** Every file under dir (.git and node_modules left out), as [relative path, absolute path]; a
 * link to a file counts as that file (DuckDB reads through it), a link to a folder is not walked. */
function filesUnder(dir, rel = '', out = []) {
  let entries;
  try {
    entries = readdirSync(path.join(dir, rel), { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (e.name === '.git' || e.name === 'node_modules') continue;
    const child = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) filesUnder(dir, child, out);
    else if (e.isFile() || e.isSymbolicLink()) out.push([child, path.join(dir, child)]);
  }
  return out;
}

/** The cache key of a package as it is on disk now (see above). */
function packageKey(pkgDir, allowed) {
  const h = createHash('sha256');
  h.update(`malloy-evals model cache 1\0${runnerCodeDigest()}\0`);
  for (const dir of allowed) {
    h.update(`dir\0${dir}\0`);
    for (const [rel, abs] of filesUnder(dir)) {
      h.update(`${rel}\0`);
      const st = statSync(abs, { bigint: true, throwIfNoEntry: false }); // through a link
      if (!st || !st.isFile()) {
        h.update('not a file\0');
      } else if (dir === pkgDir && rel.endsWith('.malloy')) {
        h.update(readFileSync(abs)).update('\0');
      } else {
        h.update(`${st.size}:${st.mtimeNs}:${st.ctimeNs}:${st.ino}:${st.dev}\0`);
      }
    }
  }
  return h.digest('hex');
}

/** The cache folder, made if missing; null unless it is a real folder of this user's, closed to
 * others. */
function cacheFolder(dir) {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const st = lstatSync(dir);
    const own = typeof process.getuid !== 'function' || st.uid === process.getuid();
    return st.isDirectory() && own && (st.mode & 0o077) === 0 ? dir : null;
  } catch {
    return null;
  }
}

/** The cached compile of `key`, or null: read without following a link, and only from a regular
 * file of this user's that no one else may write. */
function readCached(dir, key) {
  let fd = null;
  try {
    fd = openSync(path.join(dir, `${key}.json`), fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
    const st = fstatSync(fd);
    const own = typeof process.getuid !== 'function' || st.uid === process.getuid();
    if (!st.isFile() || !own || (st.mode & 0o022) !== 0) return null;
    const doc = JSON.parse(readFileSync(fd, 'utf8'));
    return doc && doc.key === key && doc.models && typeof doc.models === 'object' ? doc : null;
  } catch {
    return null;
  } finally {
    if (fd !== null) closeSync(fd);
  }
}

/** Keep a compile: written to a new file of its own, then renamed into place (a reader sees the
 * whole file or none); the oldest files past MODEL_CACHE_ENTRIES are removed. Never fails a load. */
function writeCached(dir, key, models) {
  const target = path.join(dir, `${key}.json`);
  const temp = path.join(dir, `.${key}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    const text = JSON.stringify({ key, models: Object.fromEntries(models) });
    if (text.length > MODEL_CACHE_MAX_CHARS) return false;
    const fd = openSync(temp, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, 0o600);
    try {
      writeSync(fd, text);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, target);
  } catch {
    try {
      unlinkSync(temp);
    } catch {
      // nothing was written
    }
    return false;
  }
  try {
    const kept = readdirSync(dir)
      .filter((n) => /^[0-9a-f]{64}\.json$/.test(n))
      .map((n) => [n, lstatSync(path.join(dir, n)).mtimeMs])
      .sort((a, b) => b[1] - a[1]);
    for (const [n] of kept.slice(MODEL_CACHE_ENTRIES)) unlinkSync(path.join(dir, n));
  } catch {
    // another runner pruned first
  }
  return true;
}

// ---------- load ----------

async function load(pkgDir, allow, options = {}) {
  if (state) await closeState();
  pkgDir = path.resolve(pkgDir);
  const allowed = [pkgDir, ...(allow || []).map((d) => path.resolve(d))];
  process.chdir(pkgDir);
  const conn = new DuckDBConnection({
    name: 'duckdb',
    databasePath: ':memory:',
    workingDirectory: pkgDir,
    securityPolicy: 'sandboxed', // no extension downloads, file access only inside allowed dirs
    allowedDirectories: allowed,
    threads: 1, // one thread: deterministic row order and float sums
    memoryLimit: options.memory_limit || DEFAULT_MEMORY_LIMIT,
  });
  const modelCache = new RecordingModelCache();
  const cacheManager = new CacheManager(modelCache);
  const runtime = new SingleConnectionRuntime({
    urlReader: { readURL: async (u) => readFile(new URL(u), 'utf8') },
    connection: conn,
    cacheManager,
  });
  state = {
    pkgDir, allow: allow || [], options, conn, runtime, models: new Map(), entities: [], index: null,
    csvTables: new Map(), // table name as the SQL writes it -> {filePath, uses, detected, stamp, read, ...}
    queries: new Map(), // compiled queries: cache key -> PreparedResult, least recently used first
    tables: null, // every table the models read, as the SQL names it (read when a variant first asks)
    columns: new Map(), // a varied table's columns: SQL name -> DESCRIBE rows
    modelCache: 'off', // 'read': every model came from the cache; 'compiled': compiled here
  };
  const folder = typeof options.model_cache === 'string' && options.model_cache ? cacheFolder(options.model_cache) : null;
  let key = null;
  if (folder) {
    try {
      key = packageKey(pkgDir, allowed);
    } catch {
      key = null; // a file that vanished while it was read: compile, keep nothing
    }
  }
  const cached = key ? readCached(folder, key) : null;
  if (cached) {
    modelCache.priming = true;
    try {
      for (const [url, entry] of Object.entries(cached.models)) await cacheManager.setCachedModelDef(url, entry);
    } catch {
      // a malformed entry: whatever was not primed is compiled
    } finally {
      modelCache.priming = false;
    }
  }
  for (const rel of await findModels(pkgDir)) {
    const entry = { mm: null, model: null, info: null, error: null, problems: [] };
    try {
      entry.mm = runtime.loadModel(pathToFileURL(path.join(pkgDir, rel)));
      entry.model = await entry.mm.getModel();
      entry.info = modelDefToModelInfo(entry.model._modelDef);
    } catch (err) {
      entry.error = err.message || String(err);
      entry.problems = problemList(err);
    }
    state.models.set(rel, entry);
  }
  const failed = [...state.models.values()].some((e) => e.error);
  if (key && modelCache.compiled === 0 && cached && !failed) {
    state.modelCache = 'read';
    // A compile opens DuckDB (it reads the tables' schemas); a model read from the cache did
    // not, so DuckDB is opened now: the runner is ready for its first query when load answers.
    // And the compiler is warmed (the parser builds its tables on its first text, about a
    // second of CPU that the compile used to pay): one small query compiled, never run, so a
    // first query is not charged for it against its budget.
    try {
      await duckRows('SELECT 1');
      const [, first] = [...state.models.entries()][0] || [];
      const source = first ? sourceInfos(first)[0] : null;
      if (source) await first.mm.loadRestrictedQuery(`\nrun: ${quoteName(source.name, 'source')} -> { aggregate: n is count() }`).getPreparedResult();
    } catch {
      // the first query meets the same failure and reports it
    }
  } else if (key) {
    state.modelCache = 'compiled';
    if (!failed && modelCache.compiled > 0) writeCached(folder, key, modelCache.models);
  }
  buildEntities();
  if (options.csv_types !== false) registerCsvTables();
  return loadSummary();
}

function loadSummary() {
  const errors = [];
  for (const [p, e] of state.models) if (e.error) errors.push({ path: p, message: e.error, problems: e.problems });
  return {
    package_dir: state.pkgDir, models: [...state.models.keys()], errors, entities: state.entities.length,
    model_cache: state.modelCache,
  };
}

// ---------- CSV column types, detected once per table per load ----------
//
// DuckDB reads `duckdb.table('x.csv')` (SQL `FROM 'x.csv'`) by sniffing the file's dialect and
// column types on every query; on small tables the sniffing costs more than the query. The runner
// sniffs each CSV table of the package once (when a second query reads it: a runner that answers
// one query never pays for it), and writes the read it detected into the SQL of each later query
// in place of the bare file name: `FROM read_csv('x.csv', <every option the
// sniffer found>)`. auto_detect stays on with every option given, so the sniffer only confirms
// them (cheap) and the scan keeps the row estimate a sniffing read has: with it off DuckDB guesses
// 42 rows a file, plans joins in another order, and float sums change in the last digits. (A view
// of the same name would not do: a filter over a view is estimated differently, with the same
// effect.)
//
// A table's declared read is used only when it gives the same column types, the same row
// estimate and the same rows as the sniffing read (checked when detected); otherwise, and for
// anything but a plain CSV file path, the SQL is left as Malloy wrote it. A file that changes
// (size, mtime or inode) is detected again before the next query.

/** Every table the compiled models read, as the SQL names it (a file path is a quoted string). */
function tablePaths() {
  const found = new Set();
  const seen = new Set();
  const walk = (node) => {
    if (!node || typeof node !== 'object' || seen.has(node)) return;
    seen.add(node);
    if (node.type === 'table' && typeof node.tablePath === 'string') found.add(node.tablePath);
    for (const v of Array.isArray(node) ? node : Object.values(node)) walk(v);
  };
  for (const entry of state.models.values()) if (entry.model) walk(entry.model._modelDef);
  return [...found];
}

function fileStamp(filePath) {
  try {
    const st = statSync(path.resolve(state.pkgDir, filePath));
    return st.isFile() ? `${st.ino}:${st.size}:${st.mtimeMs}` : null;
  } catch {
    return null;
  }
}

async function duckRows(sql) {
  return (await state.conn.runRawSQL(sql)).rows;
}

/** The declared read of one CSV file (`read_csv(...)`), or null when today's read must stand. */
async function declaredRead(filePath, stamp) {
  if (!stamp) return null;
  try {
    const [sniff] = await duckRows(`SELECT Prompt AS prompt FROM sniff_csv(${sqlString(filePath)})`);
    const prompt = String(sniff.prompt).trim().replace(/;$/, '');
    if (!/^FROM read_csv\(/.test(prompt) || !/\bauto_detect=false\b/.test(prompt)) return null;
    const read = prompt.replace(/^FROM /, '').replace(/\bauto_detect=false\b/, 'auto_detect=true');
    const declared = `SELECT * FROM ${read}`;
    const today = `SELECT * FROM ${sqlString(filePath)}`;
    const same = async (fn) => (await fn(declared)) === (await fn(today));
    const types = async (sql) => JSON.stringify((await duckRows(`DESCRIBE ${sql}`)).map((c) => [c.column_name, c.column_type]));
    const estimates = async (sql) => JSON.stringify((await duckRows(`EXPLAIN ${sql}`))
      .map((r) => String(r.explain_value || '')).join('\n').match(/~[\d,]+ rows/g));
    if (!(await same(types)) || !(await same(estimates))) return null;
    // As many rows, none of them missing from today's read: the same rows (as multisets).
    const [diff] = await duckRows(
      `SELECT (SELECT count(*) FROM (${declared} EXCEPT ALL ${today})) AS n, ` +
      `(SELECT count(*) FROM (${declared})) - (SELECT count(*) FROM (${today})) AS d`);
    return Number(diff.n) === 0 && Number(diff.d) === 0 ? read : null;
  } catch {
    return null; // a file the sniffer cannot read is left to DuckDB's own read and its error
  }
}

/** A table reference in compiled SQL, `FROM <sqlName> AS ...` or `JOIN <sqlName> AS ...` (the
 * keyword captured), as a pattern for `flags`. */
function tableReference(sqlName, flags) {
  const quoted = sqlName.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(\\b(?:FROM|JOIN)\\s+)${quoted}(?=\\s+AS\\s)`, flags);
}

/** The package's CSV tables, registered at load; each is detected when a second query reads it
 * (a runner that answers one query, as `reexecute.py --local` does, never pays for detection). */
function registerCsvTables() {
  for (const sqlName of tablePaths()) {
    // Only a plain CSV file path, written as one SQL string: no glob, no URL, no other read.
    const m = sqlName.match(/^'((?:[^']|'')*)'$/);
    const filePath = m ? m[1].replace(/''/g, "'") : null;
    if (!filePath || !/\.csv$/i.test(filePath) || /[*?[{]|:\/\//.test(filePath)) continue;
    state.csvTables.set(sqlName, {
      filePath, uses: 0, detected: false, stamp: null, read: null,
      finds: tableReference(sqlName, 'i'), replaces: tableReference(sqlName, 'gi'),
    });
  }
}

/** `sql` with each detected table's bare name (a table reference with an alias) read as declared;
 * a table read for the second time is detected now, and one whose file changed, again. */
async function withDeclaredReads(sql) {
  for (const t of state.csvTables.values()) {
    if (!t.finds.test(sql)) continue;
    t.uses += 1;
    if (t.uses < 2) continue;
    const stamp = fileStamp(t.filePath);
    if (!t.detected || stamp !== t.stamp) {
      Object.assign(t, { stamp, detected: true, read: await declaredRead(t.filePath, stamp) });
    }
    if (t.read) sql = sql.replace(t.replaces, (_m, head) => head + t.read);
  }
  return sql;
}

/** What became of each CSV table: how many queries read it, and whether it is read as declared
 * (null: not detected yet). */
function csvTables() {
  return [...state.csvTables.values()]
    .map((t) => ({ path: t.filePath, uses: t.uses, declared: t.detected ? Boolean(t.read) : null }))
    .sort((a, b) => (a.path < b.path ? -1 : 1));
}

async function closeState() {
  const s = state;
  state = null;
  try {
    await s.conn.close();
  } catch {
    // a connection that never opened has nothing to close
  }
}

/** The named queries of a compiled model: [{name, source, doc}]. */
function namedQueries(entry) {
  const out = [];
  const contents = entry.model._modelDef.contents || {};
  const infoByName = new Map((entry.info.entries || []).map((e) => [e.name, e]));
  for (const [name, def] of Object.entries(contents)) {
    if (!def || def.type !== 'query') continue;
    let source = def.structRef;
    if (source && typeof source === 'object') source = source.as || source.name || null;
    const info = infoByName.get(name);
    out.push({ name, source: source || null, doc: docText(info && info.annotations), annotations: info ? info.annotations || [] : [] });
  }
  return out;
}

function sourceInfos(entry) {
  const queries = new Set(namedQueries(entry).map((q) => q.name));
  return (entry.info.entries || []).filter((e) => e.kind === 'source' && !queries.has(e.name));
}

/** Publisher-style entity records, deduplicated on (kind, source, name), and the lunr index. */
function buildEntities() {
  const seen = new Set();
  const entities = [];
  const add = (kind, source, name, modelPath, annotations) => {
    const key = `${kind}\u0000${source}\u0000${name}`;
    if (seen.has(key)) return;
    seen.add(key);
    entities.push({ id: String(entities.length), kind, name, source, modelPath, doc: entityDoc(annotations) });
  };
  for (const [modelPath, entry] of state.models) {
    if (entry.error) continue;
    for (const src of sourceInfos(entry)) {
      add('source', src.name, src.name, modelPath, src.annotations);
      for (const f of src.schema?.fields || []) {
        if (f.kind === 'dimension' || f.kind === 'measure' || f.kind === 'view' || f.kind === 'join') {
          add(f.kind, src.name, f.name, modelPath, f.annotations);
        }
      }
    }
    for (const q of namedQueries(entry)) add('query', q.source, q.name, modelPath, q.annotations);
  }
  state.entities = entities;
  state.index = lunr(function () {
    this.ref('id');
    this.field('name', { boost: 4 });
    this.field('source');
    this.field('doc');
    for (const e of entities) if (INDEXED_KINDS.has(e.kind) || e.kind === 'join') this.add(e);
  });
}

// ---------- ops ----------

/** `read(entry)` for every model that compiled, with its path; and the errors of the others. */
function perModel(read) {
  const models = [];
  const errors = [];
  for (const [p, entry] of state.models) {
    if (entry.error) errors.push({ path: p, message: entry.error, problems: entry.problems });
    else models.push({ path: p, ...read(entry) });
  }
  return { models, errors };
}

function describe() {
  return perModel((entry) => {
    const sources = sourceInfos(entry).map((src) => {
      const fields = src.schema?.fields || [];
      const pick = (kind) => fields.filter((f) => f.kind === kind);
      return {
        name: src.name,
        doc: docText(src.annotations),
        dimensions: pick('dimension').map((f) => ({ name: f.name, type: typeName(f.type), doc: docText(f.annotations) })),
        measures: pick('measure').map((f) => ({ name: f.name, type: typeName(f.type), doc: docText(f.annotations) })),
        views: pick('view').map((f) => ({ name: f.name, doc: docText(f.annotations) })),
        joins: pick('join').map((f) => ({ name: f.name, relationship: f.relationship || null, doc: docText(f.annotations) })),
      };
    });
    const queries = namedQueries(entry).map(({ name, source, doc }) => ({ name, source, doc }));
    return { sources, queries };
  });
}

// ---------- definitions: what each named field references ----------

// Keys of the compiled IR that hold no field use of the definition itself: source locations,
// docs, the shape of a result, a join's ON keys (plumbing, not a use), output-name ordering.
const NOT_A_USE = new Set(['at', 'location', 'annotation', 'annotations', 'drillExpression',
  'outputStruct', 'refSummary', 'fieldUsage', 'resultMetadata', 'orderBy', 'fields', 'onExpression',
  'typeDef', 'parameters', 'arguments', 'sourceArguments', 'givenUsage']);
const JOIN_DEPTH = 4; // joins followed below a source
const MAX_KEYS = 20000; // definitions kept per source

/** Every field path an IR node uses: field nodes, field references, aggregate join paths. Only
 * a pipeline's first stage reads the source; later stages read its output. */
function fieldUses(node, out, depth = 0) {
  if (depth > 200 || node === null || typeof node !== 'object') return out;
  if (Array.isArray(node)) {
    for (const x of node) fieldUses(x, out, depth + 1);
    return out;
  }
  if ((node.node === 'field' || node.type === 'fieldref') && Array.isArray(node.path) && node.path.length) {
    out.add(node.path.join('.'));
  }
  if (Array.isArray(node.structPath) && node.structPath.length) out.add(node.structPath.join('.'));
  for (const [k, v] of Object.entries(node)) {
    if (NOT_A_USE.has(k)) continue;
    if (k === 'pipeline' && Array.isArray(v)) fieldUses(v[0], out, depth + 1);
    else fieldUses(v, out, depth + 1);
  }
  return out;
}

/** A source's definitions, keyed by field path from the source (through its joins): the paths
 * each dimension, measure and view uses, and each filtered join's own `where:`; '' holds the
 * source's own filters. Paths are from the same source, so `orders.counts_as_sale` uses
 * `orders.status`. */
function structDefinitions(struct, prefix = '', out = {}, depth = 0) {
  const own = (refs) => [...refs].map((r) => prefix + r);
  if (!prefix) {
    const filters = fieldUses(struct.filterList || [], new Set());
    if (filters.size) out[''] = own(filters);
  }
  for (const f of struct.fields || []) {
    if (Object.keys(out).length >= MAX_KEYS) break;
    const key = prefix + (f.as || f.name);
    if (f.join) {
      const filters = fieldUses(f.filterList || [], new Set());
      if (filters.size) out[key] = [...filters].map((r) => `${key}.${r}`);
      if (depth < JOIN_DEPTH) structDefinitions(f, key + '.', out, depth + 1);
      continue;
    }
    let refs = null;
    if (f.type === 'turtle') refs = fieldUses((f.pipeline || [])[0] || {}, new Set());
    else if (f.e) refs = fieldUses(f.e, new Set());
    if (refs && refs.size) out[key] = own(refs);
  }
  return out;
}

function definitions() {
  return perModel((entry) => {
    const sources = {};
    const queries = {};
    for (const [name, def] of Object.entries(entry.model._modelDef.contents || {})) {
      if (!def || typeof def !== 'object') continue;
      if (def.type === 'query') {
        let source = def.structRef;
        if (source && typeof source === 'object') source = source.as || source.name || null;
        queries[name] = { source: source || null, refs: [...fieldUses((def.pipeline || [])[0] || {}, new Set())] };
      } else if (Array.isArray(def.fields) && def.type !== 'query_source') {
        sources[name] = structDefinitions(def);
      }
    }
    return { sources, queries };
  });
}

// ---------- field sites: where each definition is written, and what it computes ----------

// Keys that say where or how a definition is written, not what it computes: two definitions that
// differ only here are the same definition (eval-improve's value check compares a candidate's
// definitions with the model's by the digest of the rest).
const NOT_WHAT = new Set(['location', 'at', 'annotation', 'annotations', 'refSummary', 'code',
  'drillExpression', 'fieldUsage', 'sourceID', 'referenceID']);

function definitionDigest(def) {
  const text = JSON.stringify(def, (k, v) => (NOT_WHAT.has(k) ? undefined : typeof v === 'bigint' ? v.toString() : v));
  return createHash('sha256').update(text || '').digest('hex').slice(0, 32);
}

function fieldKind(f) {
  if (f.type === 'turtle') return 'view';
  const e = String(f.expressionType || 'scalar');
  if (e === 'scalar') return 'dimension';
  return e.includes('aggregate') ? 'measure' : 'calculation';
}

function siteOf(def, source, sitePath, kind) {
  const range = def.location?.range;
  return {
    source, path: sitePath, kind, type: def.type === 'turtle' ? 'view' : def.type || null,
    column: kind === 'dimension' && !def.e, // a table's own column, not an expression
    url: def.location?.url || null, line: range?.start?.line ?? null, end_line: range?.end?.line ?? null,
    code: typeof def.code === 'string' ? def.code : null, digest: definitionDigest(def),
  };
}

/** Every dimension, measure, view and named query of each model, with where it is written (file
 * URL, 0-based lines) and a digest of what it computes; fields reached through joins are listed
 * under the source that joins them (path `join.field`), so a join's inline extension shows. And
 * `tables`: every table the models read, as the SQL names it (the names `vary` takes). */
function fieldSites() {
  const read = perModel((entry) => {
    const sites = [];
    const walk = (struct, source, prefix, depth) => {
      for (const f of struct.fields || []) {
        const name = f.as || f.name;
        if (f.join) {
          if (depth < JOIN_DEPTH) walk(f, source, `${prefix}${name}.`, depth + 1);
          continue;
        }
        sites.push(siteOf(f, source, prefix + name, fieldKind(f)));
      }
    };
    for (const [name, def] of Object.entries(entry.model._modelDef.contents || {})) {
      if (!def || typeof def !== 'object') continue;
      if (def.type === 'query') sites.push(siteOf(def, null, name, 'query'));
      else if (Array.isArray(def.fields) && def.type !== 'query_source') walk(def, name, '', 0);
    }
    return { sites };
  });
  return { ...read, tables: tablePaths() };
}

// ---------- variants: the package's tables changed in a known way, for one query ----------
//
// eval-improve's value check asks whether a definition's value follows from the data: it runs the
// same query with the tables it names replaced by a variant and sees what moves. `shifted` adds 1
// to every number (keys on both sides of a join move together, so joins still match), `subset`
// drops every third row, `relabelled` appends RELABEL_MARK to every text (filters on a written
// text stop matching; text read from the data carries the mark).
const VARIANTS = new Set(['shifted', 'subset', 'relabelled']);
const RELABEL_MARK = '\u00a7';
const NUMERIC_TYPE = /^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT|FLOAT|DOUBLE|REAL|DECIMAL)/;

async function tableColumns(sqlName) {
  if (!state.columns.has(sqlName)) state.columns.set(sqlName, await duckRows(`DESCRIBE SELECT * FROM ${sqlName}`));
  return state.columns.get(sqlName);
}

async function variantTable(sqlName, variant) {
  if (variant === 'subset') {
    return `SELECT * EXCLUDE (__variant_row) FROM (SELECT *, row_number() OVER () AS __variant_row FROM ${sqlName}) WHERE __variant_row % 3 <> 0`;
  }
  const columns = (await tableColumns(sqlName)).map(({ column_name: name, column_type: type }) => {
    const c = sqlIdent(name);
    const t = String(type).toUpperCase();
    if (variant === 'shifted' && NUMERIC_TYPE.test(t)) return `${c} + 1 AS ${c}`;
    if (variant === 'relabelled' && t === 'VARCHAR') return `${c} || ${sqlString(RELABEL_MARK)} AS ${c}`;
    return c;
  });
  return `SELECT ${columns.join(', ')} FROM ${sqlName}`;
}

/** `sql` reading each table of `vary` (SQL names from field_sites) as its `variant`. */
async function variantSql(sql, variant, vary) {
  if (!VARIANTS.has(variant)) throw new RequestError(`unknown variant: ${JSON.stringify(variant)}; one of ${[...VARIANTS].join(', ')}`);
  if (!state.tables) state.tables = new Set(tablePaths());
  for (const sqlName of Array.isArray(vary) ? vary : []) {
    if (!state.tables.has(sqlName)) throw new RequestError(`vary: ${JSON.stringify(sqlName)} is not a table the package reads`);
    if (!tableReference(sqlName, 'i').test(sql)) continue;
    const body = await variantTable(sqlName, variant);
    sql = sql.replace(tableReference(sqlName, 'gi'), (_m, head) => `${head}(${body})`);
  }
  return sql;
}

/** A search text as lunr is given it: the Publisher's sanitising (its query operators
 * ~^:*+-" become spaces), then each word trimmed of the punctuation around it, as lunr's own
 * trimmer trims the words it indexes (lunr applies it to documents, not to queries, so on the
 * Publisher's lexical path "revenue?" matches nothing; see reference/endpoint.md). Case is lunr's
 * business: it lower-cases both sides. */
function searchText(text) {
  return String(text || '')
    .replace(/[~^:*+\-"]/g, ' ')
    .split(/\s+/)
    .map((w) => w.replace(/^\W+/, '').replace(/\W+$/, ''))
    .filter(Boolean)
    .join(' ');
}

/** lunr over the package's entities, Publisher style: sanitised text, name boosted 4x. */
function search({ text, limit, kinds, sources }) {
  const clean = searchText(text);
  const kindSet = kinds && kinds.length ? new Set(kinds) : INDEXED_KINDS;
  const sourceSet = sources && sources.length ? new Set(sources) : null;
  const cap = limit === null || limit === undefined ? SEARCH_DEFAULT_LIMIT : limit;
  if (!clean) return [];
  let hits;
  try {
    hits = state.index.search(clean);
  } catch {
    // lunr rejects some residual syntax; fall back to the words alone
    const words = clean.split(/\s+/).filter((w) => /^[\w.]+$/.test(w)).join(' ');
    hits = words ? state.index.search(words) : [];
  }
  const out = [];
  for (const h of hits) {
    const e = state.entities[Number(h.ref)];
    if (!kindSet.has(e.kind)) continue;
    if (sourceSet && !sourceSet.has(e.source)) continue;
    out.push({ ...e, score: h.score });
    if (cap > 0 && out.length >= cap) break;
  }
  return out;
}

function quoteName(name, what) {
  const s = String(name);
  if (!s || s.includes('`') || /[\r\n]/.test(s)) throw new RequestError(`invalid ${what}: ${JSON.stringify(s)}`);
  return '`' + s + '`';
}

/** The query compiled, from this runner's cache when the same text was compiled before with the
 * same givens, in the same mode, against the same model (the cache lives and dies with the
 * load). Only a query that compiled is kept; a failure is compiled again next time. */
async function compiledQuery(modelPath, entry, text, opts, trusted) {
  const key = JSON.stringify([modelPath, trusted, text, opts ? opts.givens : null]);
  const cache = state.queries;
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key); // most recently used last
    cache.set(key, hit);
    return hit;
  }
  const qm = trusted ? entry.mm.loadQuery(text) : entry.mm.loadRestrictedQuery(text);
  const prepared = await qm.getPreparedResult(opts);
  cache.set(key, prepared); // requests are handled one at a time: no reload came between
  if (cache.size > QUERY_CACHE_SIZE) cache.delete(cache.keys().next().value);
  return prepared;
}

/** `mine`: this execute as the interrupt op sees it ({withdrawn, stop}; see `running`). */
async function execute(req, mine = { withdrawn: false, stop: null }) {
  const [modelPath, entry] = modelEntry(req.model_path);
  let text;
  if (typeof req.query === 'string' && req.query.trim()) {
    text = '\n' + req.query; // the Publisher prefixes a newline, so locations are off by one as there
  } else if (req.query_name) {
    text = req.source_name
      ? `\nrun: ${quoteName(req.source_name, 'sourceName')} -> ${quoteName(req.query_name, 'queryName')}`
      : `\nrun: ${quoteName(req.query_name, 'queryName')}`;
  } else {
    throw new RequestError("either 'query' or 'queryName' must be given");
  }
  const givens = req.givens && typeof req.givens === 'object' ? req.givens : undefined;
  const opts = givens ? { givens } : undefined;
  const timeoutMs = Number.isFinite(req.timeout_ms) && req.timeout_ms > 0 ? req.timeout_ms : null;
  const byteCap = Number.isInteger(req.byte_cap) && req.byte_cap > 0 ? req.byte_cap : DEFAULT_BYTE_CAP;
  const started = Date.now();
  const timeUp = () => new BudgetError(`the query did not finish within ${timeoutMs / 1000} s (the kit's time limit for one query)`, 'query-timeout');
  const withdrawn = () => new BudgetError('the query was interrupted: its request was withdrawn', 'query-interrupted');
  const prepared = await compiledQuery(modelPath, entry, text, opts, Boolean(req.trusted));
  if (mine.withdrawn) throw withdrawn();
  if (timeoutMs && Date.now() - started > timeoutMs) throw timeUp();
  const ownLimit = prepared.resultExplore.limit;
  const serverCap = Number.isInteger(req.row_limit) && req.row_limit > 0 ? req.row_limit : DEFAULT_ROW_LIMIT;
  // A submitted query's own `limit:` may lower the cap, never raise it; trusted queries (the
  // kit's canonical queries over the truth package) keep their own limit.
  const cap = ownLimit ? (req.trusted ? ownLimit : Math.min(ownLimit, serverCap)) : serverCap;
  const limitSource = ownLimit && cap === ownLimit ? 'query' : 'server_default';
  let sql = prepared.sql;
  if (req.variant) sql = await variantSql(sql, req.variant, req.vary);
  else if (state.csvTables.size) sql = await withDeclaredReads(sql);
  // Rows are streamed and the stream stops at the cap, so DuckDB never hands over more rows
  // than are kept; their JSON size is counted against the byte cap as they arrive.
  const rows = [];
  let bytes = 0;
  let budgetError = null;
  const abort = new AbortController();
  let again = null;
  const poke = () => {
    try {
      state.conn.connection?.interrupt();
    } catch {
      // nothing running to interrupt
    }
  };
  const interrupt = (err) => {
    if (budgetError) return;
    budgetError = err;
    abort.abort();
    poke();
    // An interrupt that lands before DuckDB has begun the query is lost: repeat it until the
    // stream ends.
    again = setInterval(poke, 50);
  };
  if (mine.withdrawn) throw withdrawn();
  mine.stop = () => interrupt(withdrawn());
  const timer = timeoutMs ? setTimeout(() => interrupt(timeUp()), Math.max(0, timeoutMs - (Date.now() - started))) : null;
  try {
    for await (const row of state.conn.runSQLStream(sql, { rowLimit: cap, abortSignal: abort.signal })) {
      bytes += JSON.stringify(row, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)).length;
      if (bytes > byteCap) {
        interrupt(new BudgetError(`the query's result exceeded ${byteCap} bytes (the kit's size limit for one query); aggregate further or select fewer columns`, 'query-too-large'));
        break;
      }
      rows.push(row);
    }
  } catch (err) {
    if (!budgetError) throw err;
  } finally {
    if (timer) clearTimeout(timer);
    if (again) clearInterval(again);
  }
  if (budgetError) throw budgetError;
  const result = new Result({ ...prepared._rawQuery, result: rows, totalRows: rows.length }, prepared._modelDef);
  const wrapped = API.util.wrapResult(result);
  const limitHit = limitSource === 'server_default' && rows.length >= cap;
  const out = {
    rows: result.data.value,
    schema: wrapped.schema,
    annotations: wrapped.annotations || [],
    connection_name: wrapped.connection_name,
    model_annotations: wrapped.model_annotations,
    query_timezone: wrapped.query_timezone,
    source_annotations: wrapped.source_annotations,
    model_path: modelPath,
    _query_row_limit: cap,
    _limit_source: limitSource,
    _limit_hit: limitHit,
    sql: prepared.sql,
  };
  if (limitHit) {
    out.warning = `Result limited to ${cap} rows (server default); more rows may exist. Aggregate further or add a limit: to the query.`;
  }
  return out;
}

function modelInfo(req) {
  const [modelPath, entry] = modelEntry(req.model_path);
  return {
    path: modelPath,
    sourceInfos: sourceInfos(entry),
    queries: namedQueries(entry).map(({ name, source, doc, annotations }) => ({ name, sourceName: source, doc, annotations })),
  };
}

async function handle(req) {
  if (req.op === 'ping') return { pid: process.pid };
  if (req.op === 'load') return load(req.package_dir, req.allow, req.options || {});
  if (!state) throw new RequestError('no package loaded: send op "load" first');
  process.chdir(state.pkgDir); // relative table paths are checked against the cwd
  switch (req.op) {
    case 'reload':
      return load(state.pkgDir, state.allow, state.options);
    case 'describe':
      return describe();
    case 'definitions':
      return definitions();
    case 'entities':
      return state.entities;
    case 'search':
      return search(req);
    case 'model_info':
      return modelInfo(req);
    case 'csv_tables':
      return csvTables();
    case 'field_sites':
      return fieldSites();
    case 'execute': {
      const mine = (running = { id: req.id, withdrawn: withdrawnEarly === req.id, stop: null });
      withdrawnEarly = null;
      try {
        return await execute(req, mine);
      } finally {
        if (running === mine) running = null;
      }
    }
    default:
      throw new RequestError(`unknown op: ${req.op}`);
  }
}

// ---------- the loop ----------

function reply(obj) {
  process.stdout.write(toJson(obj) + '\n');
}

let chain = Promise.resolve();
const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
/** The interrupt op, handled as soon as its line is read (never queued behind its target): a
 * withdrawn execute stops at its next step, and inside DuckDB if its SQL is running. */
function interruptLine(line) {
  if (!line.includes('"interrupt"')) return false;
  let req;
  try {
    req = JSON.parse(line);
  } catch {
    return false;
  }
  if (!req || req.op !== 'interrupt') return false;
  if (running && running.id === req.target) {
    running.withdrawn = true;
    if (running.stop) running.stop();
  } else {
    withdrawnEarly = req.target; // its line was read with this one: it has not started yet
  }
  return true;
}

rl.on('line', (line) => {
  if (!line.trim() || interruptLine(line)) return;
  chain = chain.then(async () => {
    let req;
    try {
      req = JSON.parse(line);
    } catch (err) {
      reply({ id: null, ok: false, error: `request is not JSON: ${err.message}`, problems: [] });
      return;
    }
    try {
      const result = await handle(req);
      reply({ id: req.id, ok: true, result });
    } catch (err) {
      reply({ id: req.id, ok: false, error: err && err.message ? err.message : String(err), problems: problemList(err) });
    }
  });
});
rl.on('close', () => {
  chain.then(async () => {
    if (state) await closeState();
    process.exit(0);
  });
});
process.on('unhandledRejection', (err) => {
  process.stderr.write(`malloy runner: unhandled rejection: ${err && err.stack ? err.stack : err}\n`);
});
