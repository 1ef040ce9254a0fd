// Never compiled: see Cargo.toml.
