"""The core: what every layer shares and nothing depends on (metric catalog, result schema, files,
redaction, published peaks).  Standard library and the catalog's own data only."""
