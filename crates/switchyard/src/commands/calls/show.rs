//! How `switchyard calls` prints records: a table for people, or each record's line as JSON.

use std::io::Write;

use switchyard_core::audit::Record;

/// Where records go; a closed output (`| head`) ends the command quietly.
pub(crate) struct Out<W: Write> {
    w: std::io::BufWriter<W>,
    json: bool,
    /// Records printed so far (the table's header comes before the first).
    count: u64,
}

impl<W: Write> Out<W> {
    pub(crate) fn new(w: W, json: bool) -> Out<W> {
        Out { w: std::io::BufWriter::new(w), json, count: 0 }
    }

    pub(crate) fn shown(&self) -> bool {
        self.count > 0
    }

    /// Prints one record; false once the output is closed.
    pub(crate) fn record(&mut self, r: &Record, line: &str) -> bool {
        let text = if self.json {
            format!("{line}\n")
        } else {
            let mut t = if self.count == 0 { header() } else { String::new() };
            t.push_str(&row(r));
            t
        };
        self.count += 1;
        self.w.write_all(text.as_bytes()).is_ok()
    }

    /// Sends what is buffered; false once the output is closed.
    pub(crate) fn flush(&mut self) -> bool {
        self.w.flush().is_ok()
    }
}

impl<W: Write> Drop for Out<W> {
    fn drop(&mut self) {
        let _ = self.w.flush();
    }
}

/// Each column's width: RESULT fits the longest outcome (`shutting_down -32603 (ran?)`); a
/// longer cell is cut to its column (`--json` has it whole), so the next ones stay in line.
const COLUMNS: [(&str, usize); 6] =
    [("TIME", 23), ("SERVER", 14), ("CALL", 28), ("RESULT", 27), ("MS", 9), ("CLIENT", 0)];

fn header() -> String {
    let mut t = String::new();
    for (name, width) in COLUMNS {
        t.push_str(&format!("{name:<width$} "));
    }
    format!("{}\n", t.trim_end())
}

/// One call as a line of the table.
pub(crate) fn row(r: &Record) -> String {
    let time = r.time.replacen('T', " ", 1).trim_end_matches('Z').to_string();
    let call = match &r.tool {
        Some(t) => t.to_string(),
        None => r.method.to_string(),
    };
    let o = &r.outcome;
    let mut result = o.result.to_string();
    if let Some(code) = o.code {
        result.push_str(&format!(" {code}"));
    }
    if o.unknown {
        result.push_str(" (ran?)");
    }
    let mut client = r.client.name.as_deref().unwrap_or(&r.client.transport).to_string();
    client.push_str(&format!(" {}", r.session));
    // What content hooks did, after the client (the last column is never cut).
    for h in &r.hooks {
        let did = match (h.verdict.as_str(), h.mode.as_str()) {
            ("failed", _) => format!("failed on the {}", h.phase),
            (verdict, "audit") => format!("would {verdict} the {} (audit)", h.phase),
            ("modify", _) => format!("modified the {}", h.phase),
            ("deny", _) => format!("denied the {}", h.phase),
            (verdict, _) => format!("{verdict} the {}", h.phase),
        };
        client.push_str(&format!("  [{} {did}]", h.plugin));
    }
    let cells = [time, r.server.to_string(), call, result, format!("{:.1}", r.duration_ms), client];
    let mut t = String::new();
    for ((_, width), cell) in COLUMNS.iter().zip(cells) {
        let cell = fit(printable(&cell), *width);
        t.push_str(&format!("{cell:<width$} "));
    }
    format!("{}\n", t.trim_end())
}

/// `cell` cut to `width` characters, its end marked (0: the last column, never cut).
fn fit(cell: String, width: usize) -> String {
    if width == 0 || cell.chars().count() <= width {
        return cell;
    }
    let mut cut: String = cell.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// A client or server may name itself anything: control characters are escaped so no record
/// adds lines to the table or drives the terminal.
fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}
