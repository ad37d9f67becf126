//! The knee of a sweep: where adding load stops buying throughput and starts buying latency.
//!
//! Definition (the Kneedle rule of Satopää et al., 2011, on the throughput–latency curve): put
//! every level at (output tokens per second, median end-to-end latency), in load order; scale
//! both axes to 0–1 over the sweep; the knee is the level farthest below the straight line from
//! the first level's point to the last one's, i.e. the one with the largest
//! `x_scaled − y_scaled` gap over the chord. Before it, throughput grows faster than latency;
//! after it, latency grows faster than throughput.
//!
//! Kneedle finds the most bent point of any curve, so a candidate is kept only when the data
//! past it bear the name out: from the knee to the last level, latency grew by a larger factor
//! than throughput, and by at least [`MIN_LATENCY_GROWTH`]. A linear sweep (throughput doubling,
//! latency flat but for noise) thus has no knee. There is none either with fewer than three
//! levels, when no point lies below the chord, or when throughput or latency did not change.
//!
//! Only levels whose measurement is valid are points of the curve ([`knee_among`]): the console's
//! answer box and the report name the same level.

/// How much median latency must grow past a knee for it to be one (10 %): less is noise on a
/// flat curve.
pub const MIN_LATENCY_GROWTH: f64 = 1.10;

/// The index of the knee among `points` (`(throughput, latency)` in load order).
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    if points.len() < 3 || points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return None;
    }
    let (x_lo, x_hi) = bounds(points.iter().map(|p| p.0));
    let (y_lo, y_hi) = bounds(points.iter().map(|p| p.1));
    if x_hi <= x_lo || y_hi <= y_lo {
        return None;
    }
    let scaled: Vec<(f64, f64)> =
        points.iter().map(|&(x, y)| ((x - x_lo) / (x_hi - x_lo), (y - y_lo) / (y_hi - y_lo))).collect();
    let (first, last) = (scaled[0], scaled[scaled.len() - 1]);
    // Signed distance below the chord (positive: throughput ahead of latency).
    let (dx, dy) = (last.0 - first.0, last.1 - first.1);
    let norm = (dx * dx + dy * dy).sqrt();
    if norm == 0.0 {
        return None;
    }
    let below = |p: (f64, f64)| ((p.0 - first.0) * dy - (p.1 - first.1) * dx) / norm;
    let (best, gap) = scaled
        .iter()
        .enumerate()
        .skip(1)
        .take(scaled.len() - 2)
        .map(|(i, &p)| (i, below(p)))
        .fold((0, 0.0), |acc, (i, g)| if g > acc.1 { (i, g) } else { acc });
    if gap <= 0.0 {
        return None;
    }
    // Past the knee, latency must outgrow throughput (both as factors of their value there).
    let (knee_x, knee_y) = points[best];
    let (last_x, last_y) = points[points.len() - 1];
    if knee_x <= 0.0 || knee_y <= 0.0 {
        return None;
    }
    let latency_growth = last_y / knee_y;
    let throughput_growth = last_x / knee_x;
    (latency_growth >= MIN_LATENCY_GROWTH && latency_growth > throughput_growth).then_some(best)
}

/// The knee among a run's levels in load order, each `Some((output tok/s, E2E p50))` when its
/// measurement counts, `None` when it does not (invalid, interrupted, nothing measured): the
/// index of the knee among all the levels.
pub fn knee_among(levels: &[Option<(f64, f64)>]) -> Option<usize> {
    let counted: Vec<usize> = (0..levels.len()).filter(|&i| levels[i].is_some()).collect();
    let points: Vec<(f64, f64)> = levels.iter().flatten().copied().collect();
    knee(&points).map(|k| counted[k])
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturating_server_has_its_knee_where_throughput_flattens() {
        // Throughput doubles up to the fourth level, then barely moves while latency climbs.
        let points = [(100.0, 10.0), (200.0, 10.5), (390.0, 11.0), (700.0, 13.0), (720.0, 25.0), (730.0, 50.0)];
        assert_eq!(knee(&points), Some(3));
    }

    #[test]
    fn a_linear_sweep_has_no_knee() {
        // Throughput doubles at every level while latency stays flat but for noise: Kneedle alone
        // would call the noisiest point a knee.
        let points = [(3261.0, 8.51), (6384.0, 8.3), (11821.0, 8.85), (23500.0, 9.0)];
        assert_eq!(knee(&points), None);
        // Latency growing, but no faster than throughput past the candidate.
        assert_eq!(knee(&[(100.0, 10.0), (300.0, 10.2), (400.0, 11.0), (600.0, 16.0)]), None);
    }

    #[test]
    fn levels_that_do_not_count_are_left_off_the_curve() {
        let points = [(100.0, 10.0), (200.0, 10.5), (390.0, 11.0), (700.0, 13.0), (720.0, 25.0), (730.0, 50.0)];
        let mut levels: Vec<Option<(f64, f64)>> = points.iter().copied().map(Some).collect();
        assert_eq!(knee_among(&levels), Some(3));
        // An invalid level before the knee moves nothing but the index it is named by.
        levels.insert(1, None);
        assert_eq!(knee_among(&levels), Some(4));
        assert_eq!(knee_among(&[None, None, Some((1.0, 1.0))]), None);
    }

    #[test]
    fn no_knee_without_a_bend() {
        assert_eq!(knee(&[(1.0, 1.0), (2.0, 2.0)]), None);
        // Latency growing in step with throughput: every point on the chord.
        assert_eq!(knee(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]), None);
        // Latency rising first (points above the chord).
        assert_eq!(knee(&[(1.0, 1.0), (1.1, 5.0), (3.0, 6.0)]), None);
        assert_eq!(knee(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
        assert_eq!(knee(&[(1.0, 1.0), (2.0, f64::NAN), (3.0, 3.0)]), None);
    }
}
