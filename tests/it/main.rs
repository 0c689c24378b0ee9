// integration tests: see support.rs
