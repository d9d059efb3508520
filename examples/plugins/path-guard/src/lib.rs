//! `path-guard`: refuses a call whose arguments name a path outside the configured roots.
//!
//! Config: `{"roots": ["/abs/dir", ...], "arguments": ["path", ...], "base": "/abs/dir",
//! "tools": ["<tool glob>", ...]}`. `roots` is required. `arguments` names the arguments that
//! hold paths, at any depth of the arguments, as a string or a list of strings (default: path,
//! paths, source, destination, file, files, file_path, directory, dir, cwd). A relative path
//! is joined to `base`, or refused when there is none; `~` and `file://` URIs with %-escapes
//! are refused. `tools` (default: all) says which tools' calls are checked.
//!
//! A path is refused when it leaves every root lexically (`..` out of it). When the plugin can
//! see the roots (the host opened them to it), symbolic links are followed too: what exists
//! is resolved by the filesystem and a path not made yet by its nearest existing parent, so a
//! link out of a root is refused. When it cannot (the default: a plugin has no filesystem),
//! it says so once at init and refuses any `..`, because a link before it could lead anywhere;
//! a link already inside a root is then not seen (see docs/plugins.md). A refusal reaches the
//! client as a tool result with `isError: true` and the reason. Built against
//! `switchyard:policy@0.3.0`.

wit_bindgen::generate!({ path: "../../../wit/0.3", world: "policy" });

pub mod guard;

use std::cell::RefCell;

use plugin_util::{interest_globs, parse_config};
use serde_json::Value;
use switchyard::policy::host::{Level, log};

use guard::{Guard, Sight};

struct PathGuard;

thread_local! {
    static STATE: RefCell<Option<(Guard, Interest)>> = const { RefCell::new(None) };
}

impl Guest for PathGuard {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        let known = [guard::KEYS, &["tools"]].concat();
        if let Some(k) = config.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown key `{k}` (path-guard knows {})", known.join(", ")));
        }
        let (guard, sight) = Guard::from_config(&config)?;
        if let Sight::Lexical = sight {
            log(
                Level::Info,
                "the roots are not visible to the plugin: paths are checked lexically, `..` is refused, \
                 and symbolic links inside the roots are not followed",
            );
        }
        let (methods, tools) = interest_globs(&config, &["tools/call"])?;
        let interest = Interest { methods, tools, request: true, result: false };
        STATE.with(|s| *s.borrow_mut() = Some((guard, interest)));
        Ok(())
    }

    fn decide(_call: Call, current: Decision) -> Verdict {
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }

    fn interest() -> Interest {
        STATE.with(|s| s.borrow().as_ref().map(|(_, i)| i.clone())).unwrap_or(Interest {
            methods: Vec::new(),
            tools: Vec::new(),
            request: false,
            result: false,
        })
    }

    fn on_request(_call: HookCall, params: String) -> HookVerdict {
        STATE.with(|s| {
            let state = s.borrow();
            let Some((guard, _)) = state.as_ref() else { return HookVerdict::Continue };
            let Ok(params) = serde_json::from_str::<Value>(&params) else { return HookVerdict::Continue };
            let Some(arguments) = params.get("arguments") else { return HookVerdict::Continue };
            match guard.check(arguments) {
                Ok(()) => HookVerdict::Continue,
                Err(why) => HookVerdict::Deny(why),
            }
        })
    }

    fn on_result(_call: HookCall, _result: String) -> HookVerdict {
        HookVerdict::Continue
    }
}

export!(PathGuard);
