//! The configs the docs show are files under examples/configs, loaded here as switchyard loads
//! them; a ```toml block in README.md or docs/ that opens with `# examples/configs/NAME.toml` must
//! be that file, so what a reader copies is what this test loaded.

use std::path::{Path, PathBuf};

use switchyard_config::Config;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/config is two levels down").into()
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

#[test]
fn every_example_config_loads() {
    let configs = files(&repo().join("examples/configs"), "toml");
    assert!(configs.len() >= 3, "examples/configs holds the documented configs: {configs:?}");
    for path in configs {
        let config = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        // Each server as the daemon runs it: the file's settings under its own.
        for (name, mut server) in config.servers() {
            server.validate().unwrap_or_else(|e| panic!("{} server {name}: {e:#}", path.display()));
        }
    }
}

/// The ```toml blocks of `text` whose first line names an example file: (file, block body).
fn named_blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + "```toml\n".len()..];
        let end = body.find("```").expect("a closed code block");
        let block = &body[..end];
        if let Some(name) =
            block.lines().next().and_then(|l| l.strip_prefix("# ")).filter(|l| l.starts_with("examples/configs/"))
        {
            let content = &block[block.find('\n').map_or(block.len(), |i| i + 1)..];
            out.push((name.trim().to_string(), content.to_string()));
        }
        rest = &body[end + 3..];
    }
    out
}

#[test]
fn the_docs_show_the_example_files_as_they_are() {
    let root = repo();
    let mut pages = files(&root.join("docs"), "md");
    pages.push(root.join("README.md"));
    let mut shown = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read a docs page");
        for (name, content) in named_blocks(&text) {
            let file = std::fs::read_to_string(root.join(&name))
                .unwrap_or_else(|e| panic!("{} shows {name}, which cannot be read: {e}", page.display()));
            assert_eq!(content, file, "{} shows {name} other than it is", page.display());
            shown += 1;
        }
    }
    assert!(shown >= 3, "the docs show the example configs by name (found {shown})");
}
