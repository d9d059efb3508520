use super::*;
use std::path::PathBuf;

fn load(text: &str) -> anyhow::Result<Tolerated> {
    Config::load_tolerant(&PathBuf::from("/c/switchyard.toml"), text)
}

fn names(t: &Tolerated) -> Vec<String> {
    t.config.servers().keys().cloned().collect()
}

#[test]
fn a_whole_file_loads_as_it_is() {
    let t = load("[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"y\"\n").unwrap();
    assert!(t.is_whole());
    assert_eq!(names(&t), ["a", "b"]);
}

#[test]
fn a_server_with_a_typo_is_left_out_with_its_own_line_and_the_rest_loads() {
    let text = "\
# my servers
[limits]
call_timeout_ms = 5000

[servers.a]
command = \"x\"

[servers.b]
comand = \"y\"   # the typo
[servers.b.env]
K = \"v\"

[servers.c]
url = \"http://127.0.0.1:9/mcp\"
[servers.c.limits]
call_timeout_ms = 7000
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a", "c"]);
    assert_eq!(t.config.servers()["c"].limits.call_timeout_ms, 7000);
    assert_eq!(t.config.servers()["a"].limits.call_timeout_ms, 5000);
    let why = &t.broken_servers["b"];
    assert!(why.starts_with("config file /c/switchyard.toml, line 9, column 1:") && why.contains("comand"), "{why}");
    assert!(t.broken_plugins.is_empty());
}

#[test]
fn servers_given_inline_or_dotted_are_taken_out_by_their_lines() {
    let text = "\
[servers]
a = { command = \"x\" }
b = { command = \"y\", share = \"sometimes\" }
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a"]);
    assert!(t.broken_servers["b"].contains("line 3"), "{:?}", t.broken_servers);
    let text = "servers.a.command = \"x\"\nservers.b.commnd = \"y\"\n";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a"]);
    assert!(t.broken_servers["b"].contains("line 2"), "{:?}", t.broken_servers);
}

#[test]
fn a_server_opened_only_by_its_sub_tables_is_taken_out_whole() {
    let text = "\
[servers.a]
command = \"x\"
[servers.b.pools.default]
mxa = 3
[servers.b.limits]
call_timeout_ms = 1
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a"]);
    assert!(t.broken_servers["b"].contains("mxa"), "{:?}", t.broken_servers);
}

#[test]
fn a_broken_plugin_entry_is_named_with_the_servers_it_was_for() {
    let text = "\
[servers.a]
command = \"x\"
[servers.b]
command = \"y\"

[[plugins]]
file = \"filter.wasm\"
servers = [\"b\"]
config = \"{not json\"

[[plugins]]
file = \"ok.wasm\"

[[plugins]]
file = \"typo.wasm\"
deadline = 3
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a", "b"]);
    let files: Vec<&str> = t.config.plugins.iter().map(|p| p.file.as_str()).collect();
    assert_eq!(files, ["ok.wasm"]);
    assert_eq!(t.broken_plugins.len(), 2);
    let (filter, typo) = (&t.broken_plugins[0], &t.broken_plugins[1]);
    assert_eq!(filter.file.as_deref(), Some("filter.wasm"));
    assert_eq!(filter.servers.as_deref(), Some(&["b".to_string()][..]));
    assert!(filter.applies_to("b") && !filter.applies_to("a"));
    assert!(filter.why.contains("filter.wasm"), "{}", filter.why);
    assert_eq!(typo.file.as_deref(), Some("typo.wasm"));
    assert!(typo.servers.is_none() && typo.applies_to("a"));
    assert!(typo.why.contains("line 16") && typo.why.contains("deadline"), "{}", typo.why);
}

#[test]
fn a_plugin_entry_scoped_to_a_server_the_file_lacks_stands_for_every_server() {
    let text = "[servers.a]\ncommand = \"x\"\n[[plugins]]\nfile = \"f.wasm\"\nservers = [\"aa\"]\n";
    let t = load(text).unwrap();
    let p = &t.broken_plugins[0];
    assert!(p.servers.is_none() && p.applies_to("a"), "{p:?}");
    assert!(p.why.contains("`aa`") && p.why.contains("line 5"), "{}", p.why);
}

#[test]
fn a_plugin_entry_naming_a_broken_server_does_not_break_with_it() {
    let text = "\
[servers.a]
command = \"x\"
[servers.b]
command = \"y\"
bad = 1
[[plugins]]
file = \"f.wasm\"
servers = [\"b\"]
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a"]);
    assert!(t.broken_plugins.is_empty());
    assert_eq!(t.config.plugins[0].servers.as_deref(), Some(&["b".to_string()][..]));
}

#[test]
fn a_mistake_outside_servers_and_plugins_is_the_whole_file_s() {
    for (text, says) in [
        ("[servers.a]\ncommand = \"x\"\n[daemon]\nidle_exit = 3\n", "idle_exit"),
        ("[servers.a]\ncommand = \"x\"\n[limits]\ncall_timeout_ms = 0\n", "call_timeout_ms"),
        ("[servers.a]\ncommand = \"x\"\n[servers.b\ncommand = \"y\"\n", "line 3"),
        // Two entries for one file: each loads alone, not together.
        ("[servers.a]\ncommand = \"x\"\n[[plugins]]\nfile = \"p.wasm\"\n[[plugins]]\nfile = \"p.wasm\"\n", "second"),
        ("plugins = [{ file = \"p.wasm\", bad = 1 }]\n[servers.a]\ncommand = \"x\"\n", "bad"),
    ] {
        let e = format!("{:#}", load(text).unwrap_err());
        assert!(e.contains(says), "{text:?}: {e}");
    }
}

#[test]
fn blanking_keeps_every_line_and_character_boundary() {
    let text = "a = \"é\"\nb = 1\r\nc = 2\n";
    let out = blank(text, vec![&(0..10)]);
    assert_eq!(out.len(), text.len());
    assert_eq!(out.lines().count(), text.lines().count());
    assert!(out.ends_with("\r\nc = 2\n"), "{out:?}");
}

#[test]
fn a_mistake_in_http_leaves_the_front_out_and_every_server_in() {
    let text = "[servers.a]\ncommand = \"x\"\n\n[http]\nlisten = \"0.0.0.0:7070\"\n[http.tokens]\nci = \"${T}\"\n";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a"]);
    assert!(t.config.http.is_none());
    let why = t.broken_http.as_deref().unwrap();
    assert!(why.contains("line 5") && why.contains("reachable from other machines"), "{why}");
    assert!(!t.is_whole());
}

/// What a read-only command needs loads while another table is broken; the broken table's
/// error comes along for a warning, and a mistake in the needed table is the error.
#[test]
fn load_for_reads_the_tables_asked_for_past_a_mistake_elsewhere() {
    let path = PathBuf::from("/c/switchyard.toml");
    // With a `[[plugins]]` entry, as most configs have (the re-trial found one made `token`
    // fail on a mistake elsewhere: an array of tables could not be left out).
    let good = "[servers.fs]\ncommand = \"x\"\n\n[http]\nlisten = \"127.0.0.1:7001\"\ntoken = \"sy_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG\"\n\n[[plugins]]\nfile = \"r.wasm\"\n\n[audit]\npath = \"a.jsonl\"\n";
    let whole = Config::load_for(&path, good, &["http"]).unwrap();
    assert!(whole.elsewhere.is_none() && whole.config.servers().contains_key("fs"));
    let bad_group = format!("{good}\n[groups.typo]\nservers = [\"fs\", \"memroy\"]\n");
    let bad_server = good.replace("command = \"x\"", "comand = \"x\"");
    for text in [bad_group.as_str(), bad_server.as_str()] {
        assert!(Config::load_text(&path, text).is_err(), "the test's file must not load:\n{text}");
        let read = Config::load_for(&path, text, &["http"]).unwrap();
        let http = read.config.http.as_ref().unwrap();
        assert_eq!(http.listen.port(), 7001);
        assert_eq!(http.token.as_ref().unwrap().raw, "sy_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG");
        let why = read.elsewhere.unwrap();
        assert!(why.contains("memroy") || why.contains("comand"), "{why}");
        let audit = Config::load_for(&path, text, &["audit"]).unwrap().config;
        assert_eq!(audit.audit.path.as_deref(), Some(std::path::Path::new("/c/a.jsonl")));
        assert!(audit.http.is_none() && audit.plugins.is_empty(), "a table not asked for is left out");
    }
    let bad_http = bad_group.replace("listen =", "listn =");
    let e = format!("{:#}", Config::load_for(&path, &bad_http, &["http"]).unwrap_err());
    assert!(e.contains("listn") && e.contains("line 5"), "{e}");
}

/// Found from outside: a typo in `[groups]` made the whole file not load, so a daemon's reload
/// applied none of the file's other edits, and the log line of the group's error on a reload
/// had no line. A group that does not load is left out with its own error (file, line, what
/// is wrong with which key); the servers and the other groups load.
#[test]
fn a_group_with_a_typo_is_left_out_with_its_line_and_the_rest_loads() {
    let text = "\
[servers.a]
command = \"x\"
[servers.b]
command = \"y\"

[groups.work]
servers = [\"a\", \"bb\"]

[groups.both]
servers = [\"a\", \"b\"]
[groups.both.prefix]
a = \"first\"
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a", "b"]);
    assert!(!t.is_whole());
    let why = &t.broken_groups["work"];
    assert!(why.starts_with("config file /c/switchyard.toml, line 7: ") && why.contains("names server `bb`"), "{why}");
    assert_eq!(t.config.groups.keys().collect::<Vec<_>>(), ["both"]);
    assert_eq!(t.config.groups["both"].prefix["a"], "first");
    assert!(t.broken_servers.is_empty() && t.broken_plugins.is_empty(), "{t:?}");
}

/// A group's mistake beside a server's: each is named with its own line (the group's was not
/// said at all: the file's error was the server's).
#[test]
fn a_broken_group_and_a_broken_server_are_each_named() {
    let text = "\
[servers.a]
command = \"x\"
[servers.b]
comand = \"y\"
[groups.g]
servers = [\"a\"]
separator = \".\"
[groups.h]
servers = [\"a\", \"b\"]
";
    let t = load(text).unwrap();
    assert_eq!(names(&t), ["a"]);
    assert!(t.broken_servers["b"].contains("line 4"), "{:?}", t.broken_servers);
    let why = &t.broken_groups["g"];
    assert!(why.contains("line 7: ") && why.contains("separator \".\""), "{why}");
    // A group may name a server whose table does not load: its calls are refused with why.
    assert_eq!(t.config.groups.keys().collect::<Vec<_>>(), ["h"]);
}

/// Found from outside: with a typo in `[groups]` and one in `[telemetry]`, the file's error was
/// the group's (the first in the file), which alone would be left out; the `[telemetry]` typo
/// that stops the file loading was not said until the group's was fixed. Now it is said first,
/// with its line, and the group's after it.
#[test]
fn the_error_that_stops_the_file_is_said_first_and_a_part_s_after_it() {
    let text = "\
[servers.a]
command = \"x\"
[groups.all]
seprator = \"_\"
[telemetry]
endpont = \"http://x\"
";
    let e = format!("{:#}", load(text).unwrap_err());
    let (stops, part) = (e.find("endpont").expect(&e), e.find("seprator").expect(&e));
    assert!(stops < part, "{e}");
    assert!(e.starts_with("config file /c/switchyard.toml, line 6"), "{e}");
    assert!(e[part - 80..].contains("line 4"), "{e}");
    // One error, in a table that is never left out: said once, as it is.
    let e = format!("{:#}", load("[servers.a]\ncommand = \"x\"\n[telemetry]\nendpont = \"http://x\"\n").unwrap_err());
    assert_eq!(e.matches("endpont").count(), 1, "{e}");
}
