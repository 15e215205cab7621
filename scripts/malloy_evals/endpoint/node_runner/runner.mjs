// The kit's Malloy runner (SPEC 6): one long-lived process per package, speaking JSON lines.
//
// Each stdin line is one request {id, op, ...}; each answer is one stdout line {id, ok, result} or
// {id, ok: false, error, problems}. Requests are handled strictly one at a time, because every
// request changes the process's working directory into the package (DuckDB's sandbox checks
// relative table paths against the cwd). Nothing else is ever written to stdout.
//
// Ops: load {package_dir, allow}, reload, describe, definitions, search {text, limit, kinds,
// sources}, entities, model_info {model_path}, execute {model_path, query | source_name +
// query_name | query_name, givens, trusted, row_limit}, ping.

import { readFile, readdir } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import lunr from 'lunr';
import { API, SingleConnectionRuntime, modelDefToModelInfo } from '@malloydata/malloy';
import { DuckDBConnection } from '@malloydata/db-duckdb';

const DEFAULT_ROW_LIMIT = 1000; // the Publisher's PUBLISHER_DEFAULT_QUERY_ROW_LIMIT
const SEARCH_DEFAULT_LIMIT = 10;
// Kinds the Publisher indexes for lexical retrieval; joins are kept for the typed form only.
const INDEXED_KINDS = new Set(['source', 'view', 'query', 'dimension', 'measure']);

let state = null; // {pkgDir, allow, conn, runtime, models: Map(path -> {mm, model, info, error})...}

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

// ---------- load ----------

async function load(pkgDir, allow) {
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
  });
  const runtime = new SingleConnectionRuntime({
    urlReader: { readURL: async (u) => readFile(new URL(u), 'utf8') },
    connection: conn,
  });
  state = { pkgDir, allow: allow || [], conn, runtime, models: new Map(), entities: [], index: null };
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
  buildEntities();
  return loadSummary();
}

function loadSummary() {
  const errors = [];
  for (const [p, e] of state.models) if (e.error) errors.push({ path: p, message: e.error, problems: e.problems });
  return { package_dir: state.pkgDir, models: [...state.models.keys()], errors, entities: state.entities.length };
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

/** lunr over the package's entities, Publisher style: sanitised text, name boosted 4x. */
function search({ text, limit, kinds, sources }) {
  const clean = String(text || '').replace(/[~^:*+\-"]/g, ' ').trim();
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

async function execute(req) {
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
  const qm = req.trusted ? entry.mm.loadQuery(text) : entry.mm.loadRestrictedQuery(text);
  const prepared = await qm.getPreparedResult(opts);
  const ownLimit = prepared.resultExplore.limit;
  const serverCap = Number.isInteger(req.row_limit) && req.row_limit > 0 ? req.row_limit : DEFAULT_ROW_LIMIT;
  const cap = ownLimit ? ownLimit : serverCap;
  const limitSource = ownLimit ? 'query' : 'server_default';
  const result = await qm.run({ rowLimit: cap, ...(opts || {}) });
  const rows = result.data.value;
  const wrapped = API.util.wrapResult(result);
  const limitHit = limitSource === 'server_default' && rows.length >= cap;
  const out = {
    rows,
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
    sql: result.sql,
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
  if (req.op === 'load') return load(req.package_dir, req.allow);
  if (!state) throw new RequestError('no package loaded: send op "load" first');
  process.chdir(state.pkgDir); // relative table paths are checked against the cwd
  switch (req.op) {
    case 'reload':
      return load(state.pkgDir, state.allow);
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
    case 'execute':
      return execute(req);
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
rl.on('line', (line) => {
  if (!line.trim()) return;
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
