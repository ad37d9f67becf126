//! Numbers as people read them, for the console and the reports alike: one unit per column chosen
//! from the column's range, integers as integers, thousands separators, a few significant digits
//! rather than a raw float, and axis ticks with just enough digits to differ. The artifact keeps
//! full precision; only what is shown goes through here.

/// A time unit shown to people. Chosen once per column (or per axis) from the largest value in it,
/// so `9,689 ms` and `10.2 s` never share a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Micros,
    Millis,
    Seconds,
}

impl TimeUnit {
    /// The unit for values up to `max_ms` milliseconds: µs below 1 ms, ms below 1 s, s from there.
    pub fn for_max_ms(max_ms: f64) -> TimeUnit {
        let max = max_ms.abs();
        if !max.is_finite() || max < 1.0 {
            // Nothing finite, or everything under a millisecond.
            if max.is_finite() { TimeUnit::Micros } else { TimeUnit::Millis }
        } else if max < 1000.0 {
            TimeUnit::Millis
        } else {
            TimeUnit::Seconds
        }
    }

    /// The unit for a column of millisecond values (non-finite ones ignored).
    pub fn for_column(values_ms: impl IntoIterator<Item = f64>) -> TimeUnit {
        let max = values_ms.into_iter().filter(|v| v.is_finite()).map(f64::abs).fold(f64::NAN, f64::max);
        if max.is_nan() { TimeUnit::Millis } else { TimeUnit::for_max_ms(max) }
    }

    pub fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Micros => "µs",
            TimeUnit::Millis => "ms",
            TimeUnit::Seconds => "s",
        }
    }

    /// Milliseconds in this unit.
    pub fn from_ms(self, ms: f64) -> f64 {
        match self {
            TimeUnit::Micros => ms * 1000.0,
            TimeUnit::Millis => ms,
            TimeUnit::Seconds => ms / 1000.0,
        }
    }

    /// `ms` in this unit, three significant digits, no suffix (`0.181`, `5.18`, `12.3`, `1,234`).
    pub fn number(self, ms: f64) -> String {
        significant(self.from_ms(ms), 3)
    }

    /// `ms` in this unit with its suffix (`5.18 ms`).
    pub fn show(self, ms: f64) -> String {
        if !ms.is_finite() {
            return "–".to_string();
        }
        format!("{} {}", self.number(ms), self.suffix())
    }
}

/// One duration in milliseconds, in the unit its own size calls for (`181 µs`, `5.18 ms`, `10.2 s`).
pub fn duration_ms(ms: f64) -> String {
    TimeUnit::for_max_ms(ms).show(ms)
}

/// An integer with thousands separators: `26,945`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A signed integer with thousands separators.
pub fn thousands_signed(n: i64) -> String {
    if n < 0 { format!("-{}", thousands(n.unsigned_abs())) } else { thousands(n as u64) }
}

/// `v` with `digits` significant digits, thousands separators from 1,000 on, no exponent and no
/// trailing zeros after the point: `5.11`, `119`, `26,945`, `0.0123`. Non-finite values are `–`.
pub fn significant(v: f64, digits: u32) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (digits as i32 - 1 - magnitude).clamp(0, 9) as usize;
    let text = format!("{v:.decimals$}");
    group(&trim_zeros(text))
}

/// A count or a mean of counts: integers as integers (`2,048`), others with one decimal
/// (`32.9`).
pub fn count(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    if (v - v.round()).abs() < 1e-9 {
        return group(&format!("{:.0}", v.round()));
    }
    group(&format!("{v:.1}"))
}

/// A rate (requests or tokens per second): three significant digits below 1,000, whole numbers
/// with separators from there (`5.11`, `119`, `26,945`).
pub fn rate(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1000.0 { group(&format!("{:.0}", v.round())) } else { significant(v, 3) }
}

/// A fraction as a percentage with up to one decimal (`99 %` style without the space: `99.5%`).
pub fn percent(fraction: f64) -> String {
    if !fraction.is_finite() {
        return "–".to_string();
    }
    format!("{}%", trim_zeros(format!("{:.1}", fraction * 100.0)))
}

/// Labels for axis ticks: the fewest decimals (up to 6) at which neighbouring labels differ, the
/// same number of decimals for every tick, integers without a point.
pub fn tick_labels(values: &[f64]) -> Vec<String> {
    if values.len() < 2 {
        return values.iter().map(|&v| significant(v, 3)).collect();
    }
    let render =
        |decimals: usize| -> Vec<String> { values.iter().map(|v| group(&format!("{v:.decimals$}"))).collect() };
    (0..=6).map(render).find(|labels| labels.windows(2).all(|w| w[0] != w[1])).unwrap_or_else(|| render(6))
}

/// `12.50` → `12.5`, `3.00` → `3`; text without a point is left alone.
fn trim_zeros(text: String) -> String {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Thousands separators in the integer part of a decimal number written by `format!`.
fn group(text: &str) -> String {
    let (sign, rest) = match text.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", text),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    let grouped = match int.parse::<u64>() {
        Ok(n) => thousands(n),
        Err(_) => int.to_string(),
    };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unit_per_column_from_its_range() {
        assert_eq!(TimeUnit::for_column([0.181, 0.227]), TimeUnit::Micros);
        assert_eq!(TimeUnit::for_column([0.181, 2.38]), TimeUnit::Millis);
        let unit = TimeUnit::for_column([9689.0, 10_200.0]);
        assert_eq!(unit, TimeUnit::Seconds);
        assert_eq!(unit.show(9689.0), "9.69 s");
        assert_eq!(unit.show(10_200.0), "10.2 s");
        assert_eq!(TimeUnit::Millis.show(0.181), "0.181 ms");
        assert_eq!(TimeUnit::Micros.show(0.181), "181 µs");
        assert_eq!(duration_ms(5.18), "5.18 ms");
        assert_eq!(TimeUnit::for_column([f64::NAN]), TimeUnit::Millis);
    }

    #[test]
    fn integers_stay_integers_and_big_numbers_get_separators() {
        assert_eq!(count(2048.0), "2,048");
        assert_eq!(count(32.94), "32.9");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands_signed(-1234), "-1,234");
        assert_eq!(rate(5.114754098360656), "5.11");
        assert_eq!(rate(119.07), "119");
        assert_eq!(rate(26945.3), "26,945");
        assert_eq!(rate(0.012345), "0.0123");
        assert_eq!(significant(1.0, 3), "1");
        assert_eq!(significant(-1234.6, 3), "-1,235");
        assert_eq!(percent(0.995), "99.5%");
        assert_eq!(percent(1.0), "100%");
        assert_eq!(significant(f64::INFINITY, 3), "–");
    }

    #[test]
    fn tick_labels_differ() {
        assert_eq!(tick_labels(&[4.25, 4.2501, 4.2502]), vec!["4.2500", "4.2501", "4.2502"]);
        assert_eq!(tick_labels(&[0.0, 500.0, 1000.0]), vec!["0", "500", "1,000"]);
        assert_eq!(tick_labels(&[0.0, 0.5, 1.0]), vec!["0.0", "0.5", "1.0"]);
    }
}
