//! The demo's table of figures, its failed expectations, and how durations are shown.

use std::time::Duration;

/// The table and the failed expectations.
#[derive(Default)]
pub(super) struct Report {
    rows: Vec<[String; 4]>,
    pub(super) failures: Vec<String>,
}

impl Report {
    pub(super) fn row(&mut self, scenario: &str, what: &str, direct: impl Into<String>, routed: impl Into<String>) {
        self.rows.push([scenario.into(), what.into(), direct.into(), routed.into()]);
    }

    pub(super) fn check(&mut self, ok: bool, failure: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(failure());
        }
    }

    pub(super) fn print(&self) {
        let header = ["scenario", "measured", "directly", "through switchyard"].map(String::from);
        let mut widths = [0usize; 4];
        for row in std::iter::once(&header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |row: &[String; 4]| {
            let [a, b, c, d] = row;
            println!("{a:<w0$}  {b:<w1$}  {c:<w2$}  {d}", w0 = widths[0], w1 = widths[1], w2 = widths[2]);
        };
        line(&header);
        println!("{}", "-".repeat(widths.iter().sum::<usize>() + 6));
        for row in &self.rows {
            line(row);
        }
    }
}

/// A duration for the table and the progress lines: in seconds, or in ms under one.
pub(super) fn secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}
