"""Malloy over MCP: the Node runner that compiles and runs Malloy on DuckDB, the local Publisher-
shaped MCP endpoint, the kit's MCP client, and the get_context payload readers."""
