//! Aligned text tables.

/// A table: a header row and rows of cells; numbers are right-aligned.
#[derive(Debug)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, columns two spaces apart.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let numeric: Vec<bool> = (0..widths.len())
            .map(|i| {
                !self.rows.is_empty()
                    && self.rows.iter().all(|r| {
                        r.get(i).is_some_and(|c| {
                            c == "-" || c.trim_end_matches('%').parse::<f64>().is_ok()
                        })
                    })
            })
            .collect();
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let w = widths.get(i).copied().unwrap_or(0);
                let pad = w.saturating_sub(cell.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if numeric.get(i).copied().unwrap_or(false) {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let mut t = Table::new(&["NAME", "PACKETS"]);
        t.row(vec!["web".into(), "5".into()]);
        t.row(vec!["dns-udp".into(), "12345".into()]);
        assert_eq!(
            t.render(),
            "NAME     PACKETS\nweb            5\ndns-udp    12345\n"
        );
    }
}
