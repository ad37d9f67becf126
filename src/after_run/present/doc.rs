//! The report as a document: sections of paragraphs, tables and figures, built once from the
//! results and written out as HTML (everything) or Markdown (everything but the figures), so
//! the two formats never tell different stories.

/// The whole report.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub title: String,
    pub subtitle: String,
    pub sections: Vec<Section>,
}

#[derive(Debug, Clone, Default)]
pub struct Section {
    /// The HTML anchor.
    pub id: String,
    pub title: String,
    pub blocks: Vec<Block>,
}

impl Section {
    pub fn new(id: impl Into<String>, title: impl Into<String>) -> Self {
        Section { id: id.into(), title: title.into(), blocks: Vec::new() }
    }

    pub fn push(&mut self, b: Block) {
        self.blocks.push(b);
    }
}

#[derive(Debug, Clone)]
pub enum Block {
    /// A smaller heading inside a section.
    Heading(String),
    Text(String),
    /// Small print: definitions, methods.
    Note(String),
    /// The run's verdict, good or bad.
    Verdict {
        ok: bool,
        text: String,
    },
    /// Methodology warnings: code and message.
    Warnings(Vec<(String, String)>),
    /// The answer a reader came for, before anything else.
    Answer(Answer),
    /// Warnings grouped by kind: one line each, with the levels it applies to.
    WarningGroups(Vec<WarningLine>),
    List(Vec<String>),
    /// Label–value pairs.
    Facts(Vec<(String, String)>),
    Table(Table),
    /// Plots side by side.
    Figures(Vec<Figure>),
}

/// The box a report opens with: the headline number, the level to run at, the figures beside
/// it, and each objective met (✓) or missed (✗), as k6 marks its thresholds.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// What the number is (`capacity`, `throughput`).
    pub label: String,
    /// The number itself (`c=20`, `443 req/s`).
    pub value: String,
    /// One line under it (`the highest concurrency that met every objective`).
    pub detail: String,
    /// Label–value pairs: rates, latencies, goodput, validity.
    pub facts: Vec<(String, String)>,
    /// Objectives: met, and `ttft_p99_ms 812 ms ≤ 2,000 ms`.
    pub objectives: Vec<(bool, String)>,
    /// Whether the numbers stand (valid, nothing lost); drawn red otherwise.
    pub ok: bool,
    /// Sentences after the figures: what the target was, how the knee relates to the capacity.
    pub notes: Vec<String>,
}

/// One kind of warning: its code, where it applies (`every level`, `c=1, c=2`, or empty for a
/// single level), and its full text once.
#[derive(Debug, Clone, Default)]
pub struct WarningLine {
    pub code: String,
    pub applies: String,
    pub message: String,
}

#[derive(Debug, Clone, Default)]
pub struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// Columns from this index on hold numbers (right-aligned).
    pub numeric_from: usize,
}

impl Table {
    pub fn new(head: &[&str], numeric_from: usize) -> Self {
        Table { head: head.iter().map(|h| h.to_string()).collect(), rows: Vec::new(), numeric_from }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }
}

/// How a cell is emphasised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tone {
    #[default]
    Plain,
    Good,
    Bad,
    /// A row that stands out (the knee, the capacity point).
    Marked,
}

#[derive(Debug, Clone, Default)]
pub struct Cell {
    pub text: String,
    pub tone: Tone,
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell { text, tone: Tone::Plain }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell { text: text.to_string(), tone: Tone::Plain }
    }
}

impl Cell {
    pub fn toned(text: impl Into<String>, tone: Tone) -> Self {
        Cell { text: text.into(), tone }
    }
}

/// One plot.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Unique in the page (`plot-…`).
    pub id: String,
    pub title: String,
    pub caption: String,
    /// The SVG element.
    pub svg: String,
    /// Data points drawn.
    pub points: usize,
    /// Series names and colours.
    pub legend: Vec<LegendEntry>,
}

#[derive(Debug, Clone)]
pub struct LegendEntry {
    pub label: String,
    pub color: &'static str,
    /// Drawn as a cross (failures) or a dashed line (limits) rather than a solid swatch.
    pub shape: Swatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swatch {
    Solid,
    Dashed,
    Cross,
}
