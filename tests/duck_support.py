"""Rows DuckDB itself gives over a folder of tables: the reference re-executed rows are held to."""

from __future__ import annotations

from pathlib import Path

import duckdb


def duck_rows(sql: str, data_dir: Path) -> list[dict]:
    """Run `sql` with `data_dir` as the search path, one thread like the kit's runner."""
    con = duckdb.connect()
    try:
        con.execute("SET threads=1")
        con.execute(f"SET file_search_path='{data_dir}'")
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()
