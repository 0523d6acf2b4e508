"""One module per top-level config section; each is owned by the engine that reads it."""
