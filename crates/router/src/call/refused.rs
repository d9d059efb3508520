//! A plugin's refusal as the client's answer: a tool result the model reads for `tools/call`,
//! a JSON-RPC error for every other method (and for a plugin whose entry asks for errors).

use switchyard_core::codec;
use switchyard_core::decision::Rejection;
use switchyard_core::error::{CallError, refusal_result, withheld_result};
use switchyard_policy::PluginSet;

/// What a refused request is answered.
pub(super) struct Refused {
    /// The whole response line, with the client's id.
    pub answer: String,
    /// Its JSON-RPC error code, for the metrics; None when it is a tool result.
    pub code: Option<i64>,
    /// The plugin that refused it (`switchyard` for the host), for the audit log.
    pub by: String,
}

/// The answer to `rejection`, by a plugin of `set`, of the request with id `client_id`. `tool`:
/// the tool of a `tools/call` (None for any other method), whose refusal is a tool result with
/// `isError` unless the refusing plugin's entry says `refusals = "error"`: clients hand results
/// to the model, which can then adapt (wait, pick another tool), and may keep errors from it.
/// `modern`: a request of the 2026-07-28 era.
pub(super) fn refused(
    set: &PluginSet,
    tool: Option<&str>,
    modern: bool,
    client_id: &str,
    rejection: Rejection,
) -> Refused {
    answer(set, tool, modern, client_id, rejection, false)
}

/// The answer when a result hook withheld (`rejection`) the result of a call the server ran:
/// [`refused`]'s forms, each saying that the call ran and its result was withheld.
pub(super) fn withheld(
    set: &PluginSet,
    tool: Option<&str>,
    modern: bool,
    client_id: &str,
    rejection: Rejection,
) -> Refused {
    answer(set, tool, modern, client_id, rejection, true)
}

/// [`refused`] (`ran` false) and [`withheld`] (`ran` true): a tool result with `isError`, or
/// the error -32004 when the plugin's entry says `refusals = "error"` or it is no `tools/call`.
fn answer(
    set: &PluginSet,
    tool: Option<&str>,
    modern: bool,
    client_id: &str,
    rejection: Rejection,
    ran: bool,
) -> Refused {
    let by = rejection.plugin.clone();
    match tool {
        Some(tool) if !set.refuses_with_error(&rejection.plugin) => {
            let result =
                if ran { withheld_result(&rejection, tool, modern) } else { refusal_result(&rejection, tool, modern) };
            Refused { answer: codec::response_ok(client_id, &result), code: None, by }
        }
        _ => {
            let rejection = if ran {
                let reason = rejection.reason.trim_end_matches(['.', ' ']);
                let reason = format!(
                    "the server ran the call and answered, and its result was withheld: {reason}. The call may have \
                     changed something: do not repeat it blindly; check what it did first"
                );
                Rejection { reason, ..rejection }
            } else {
                rejection
            };
            Refused {
                answer: CallError::Rejected(rejection).to_response(client_id),
                code: Some(codec::POLICY_REJECTED),
                by,
            }
        }
    }
}
