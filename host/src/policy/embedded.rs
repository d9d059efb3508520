//! The example plugins, built by host/build.rs and embedded in the binary (for the demo).

/// `(file name, component bytes)` of each example policy plugin (not the template, not the
/// broken test fixtures).
pub const EXAMPLES: &[(&str, &[u8])] = &[
    ("hints.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/hints.wasm"))),
    ("fs-keys.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/fs-keys.wasm"))),
    ("timeouts.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/timeouts.wasm"))),
    ("guard.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/guard.wasm"))),
];
