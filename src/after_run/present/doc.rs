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
    List(Vec<String>),
    /// Label–value pairs.
    Facts(Vec<(String, String)>),
    Table(Table),
    /// Plots side by side.
    Figures(Vec<Figure>),
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
