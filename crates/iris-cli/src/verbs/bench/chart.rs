//! The chart: a hand-written SVG of grouped bars, one panel per mode (warm, direct=1,
//! fdatasync), one group per cell, one bar per target, IOPS on a shared log scale so panels
//! compare; above each group Iris's ratio to the best kernel file system and to the floor.
//! Every bar carries a tooltip with its numbers.

use super::cells::{block_label, Mode};
use super::results::CellResult;
use super::table::{iops_text, micros_text, ratio_text};
use super::targets::TargetKind;

/// Bar width in pixels.
const BAR_W: f64 = 13.0;
/// Gap between bars of a group.
const BAR_GAP: f64 = 2.0;
/// Gap between groups.
const GROUP_GAP: f64 = 30.0;
/// Room for the axis labels on the left.
const LEFT: f64 = 64.0;
/// Margin on the right.
const RIGHT: f64 = 24.0;
/// Room for the title, subtitle and legend.
const TOP: f64 = 96.0;
/// Panel title and ratio annotations above the plot.
const PANEL_HEAD: f64 = 56.0;
/// Height of a panel's plot area.
const PLOT_H: f64 = 220.0;
/// Group labels below the plot.
const PANEL_FOOT: f64 = 46.0;
/// Narrowest chart (room for the legend and title).
const MIN_WIDTH: f64 = 760.0;
/// Narrowest group of bars (room for its label).
const MIN_GROUP_W: f64 = 96.0;

/// Bar colour of a target.
fn colour(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Iris => "#d62728",
        TargetKind::Floor => "#ff9f9a",
        TargetKind::Tmpfs => "#1f77b4",
        TargetKind::Ext4 => "#2ca02c",
        TargetKind::Xfs => "#9467bd",
        TargetKind::Memcpy => "#8c8c8c",
    }
}

/// Legend text of a target.
fn legend(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Iris => "iris",
        TargetKind::Floor => "floor (bare LD_PRELOAD shim, memcpy)",
        TargetKind::Tmpfs => "tmpfs",
        TargetKind::Ext4 => "ext4 (loop on /dev/shm)",
        TargetKind::Xfs => "xfs (loop on /dev/shm)",
        TargetKind::Memcpy => "memcpy (in-process loads/stores)",
    }
}

/// The SVG document for `results` over targets `kinds`, with `subtitle` lines under the title.
pub fn svg(results: &[CellResult], kinds: &[TargetKind], subtitle: &[String]) -> String {
    let modes: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|m| results.iter().any(|r| r.cell.mode == *m))
        .collect();
    let group_w = (kinds.len() as f64 * (BAR_W + BAR_GAP) - BAR_GAP + GROUP_GAP).max(MIN_GROUP_W);
    let most_groups = modes
        .iter()
        .map(|m| results.iter().filter(|r| r.cell.mode == *m).count())
        .max()
        .unwrap_or(0);
    let width = (LEFT + most_groups as f64 * group_w + RIGHT).max(MIN_WIDTH);
    let panel_h = PANEL_HEAD + PLOT_H + PANEL_FOOT;
    let top = TOP + 14.0 * subtitle.len().saturating_sub(1) as f64;
    let height = top + modes.len() as f64 * panel_h + 16.0;
    let scale = Scale::over(results);

    let mut out = String::new();
    out.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"Helvetica, Arial, sans-serif\">\n"
    ));
    out.push_str(&format!(
        "<rect width=\"{width:.0}\" height=\"{height:.0}\" fill=\"white\"/>\n"
    ));
    out.push_str(&text(
        LEFT,
        26.0,
        17.0,
        "start",
        "bold",
        "iris bench: IOPS per cell, log scale (higher is better)",
    ));
    for (i, line) in subtitle.iter().enumerate() {
        out.push_str(&text(
            LEFT,
            46.0 + 14.0 * i as f64,
            11.0,
            "start",
            "normal",
            line,
        ));
    }
    draw_legend(&mut out, kinds, top - 30.0);
    for (i, mode) in modes.iter().enumerate() {
        let top = top + i as f64 * panel_h;
        let cells: Vec<&CellResult> = results.iter().filter(|r| r.cell.mode == *mode).collect();
        draw_panel(&mut out, *mode, &cells, kinds, &scale, top, width, group_w);
    }
    out.push_str("</svg>\n");
    out
}

/// A log scale from a power of ten below the smallest IOPS to one above the largest.
struct Scale {
    low_exp: i32,
    high_exp: i32,
}

impl Scale {
    fn over(results: &[CellResult]) -> Scale {
        let values: Vec<f64> = results
            .iter()
            .flat_map(|r| r.by_target.values())
            .filter_map(|o| o.as_ref().ok().map(|m| m.iops))
            .filter(|v| *v > 0.0)
            .collect();
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(0.0, f64::max);
        if values.is_empty() {
            return Scale {
                low_exp: 3,
                high_exp: 7,
            };
        }
        let low_exp = low.log10().floor() as i32;
        let high_exp = (high.log10().ceil() as i32).max(low_exp + 1);
        Scale { low_exp, high_exp }
    }

    /// Height above the plot's bottom of `iops`, 0 to [`PLOT_H`].
    fn height(&self, iops: f64) -> f64 {
        if iops <= 0.0 {
            return 0.0;
        }
        let span = f64::from(self.high_exp - self.low_exp);
        ((iops.log10() - f64::from(self.low_exp)) / span * PLOT_H).clamp(0.0, PLOT_H)
    }
}

fn draw_legend(out: &mut String, kinds: &[TargetKind], y: f64) {
    let mut x = LEFT;
    let mut y = y;
    for &kind in kinds {
        let label = legend(kind);
        let w = 22.0 + label.len() as f64 * 6.2;
        if x + w > MIN_WIDTH - RIGHT && x > LEFT {
            x = LEFT;
            y += 18.0;
        }
        out.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n",
            y - 10.0,
            colour(kind)
        ));
        out.push_str(&text(x + 16.0, y, 11.0, "start", "normal", label));
        x += w + 14.0;
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_panel(
    out: &mut String,
    mode: Mode,
    cells: &[&CellResult],
    kinds: &[TargetKind],
    scale: &Scale,
    top: f64,
    width: f64,
    group_w: f64,
) {
    let plot_top = top + PANEL_HEAD;
    let bottom = plot_top + PLOT_H;
    out.push_str(&text(LEFT, top + 18.0, 13.0, "start", "bold", mode.title()));
    // Decade grid lines with labels, faint lines at 2x and 5x.
    for exp in scale.low_exp..=scale.high_exp {
        let decade = 10f64.powi(exp);
        let y = bottom - scale.height(decade);
        out.push_str(&format!(
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#bbbbbb\" stroke-width=\"1\"/>\n",
            width - RIGHT
        ));
        out.push_str(&text(
            LEFT - 6.0,
            y + 4.0,
            10.0,
            "end",
            "normal",
            &decade_text(exp),
        ));
        if exp < scale.high_exp {
            for m in [2.0, 5.0] {
                let y = bottom - scale.height(decade * m);
                out.push_str(&format!(
                    "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eeeeee\" stroke-width=\"1\"/>\n",
                    width - RIGHT
                ));
            }
        }
    }
    let y = plot_top + PLOT_H / 2.0;
    out.push_str(&format!(
        "<text x=\"16\" y=\"{y:.1}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#222222\" \
         transform=\"rotate(-90 16 {y:.1})\">IOPS</text>\n"
    ));
    for (g, r) in cells.iter().enumerate() {
        let x0 = LEFT + GROUP_GAP / 2.0 + g as f64 * group_w;
        let bars_w = group_w - GROUP_GAP;
        let centre = x0 + bars_w / 2.0;
        for (b, &kind) in kinds.iter().enumerate() {
            let x = x0 + b as f64 * (BAR_W + BAR_GAP);
            match r.by_target.get(&kind) {
                Some(Ok(m)) => {
                    let h = scale.height(m.iops).max(1.0);
                    out.push_str(&format!(
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{BAR_W}\" height=\"{h:.1}\" fill=\"{}\">\
                         <title>{}</title></rect>\n",
                        bottom - h,
                        colour(kind),
                        escape(&format!(
                            "{} {}: {} IOPS, mean {} µs, p99 {} µs",
                            r.cell.label(),
                            kind.name(),
                            iops_text(m.iops),
                            micros_text(m.mean_ns),
                            micros_text(m.p99_ns)
                        ))
                    ));
                }
                Some(Err(_)) => {
                    out.push_str(&text(
                        x + BAR_W / 2.0,
                        bottom - 4.0,
                        11.0,
                        "middle",
                        "bold",
                        "×",
                    ));
                }
                None => {}
            }
        }
        if let Some(x) = r.iris_over_best_kernel() {
            out.push_str(&text(
                centre,
                top + 36.0,
                10.0,
                "middle",
                "bold",
                &format!("{} best kernel", ratio_text(x)),
            ));
        }
        if let Some(x) = r.iris_over(TargetKind::Floor) {
            out.push_str(&text(
                centre,
                top + 49.0,
                10.0,
                "middle",
                "normal",
                &format!("{} floor", ratio_text(x)),
            ));
        }
        let c = &r.cell;
        out.push_str(&text(
            centre,
            bottom + 16.0,
            11.0,
            "middle",
            "normal",
            &format!("{} {}", c.rw.fio_name(), block_label(c.block_bytes)),
        ));
        out.push_str(&text(
            centre,
            bottom + 30.0,
            10.0,
            "middle",
            "normal",
            if c.jobs == 1 { "1 job" } else { "2 jobs" },
        ));
    }
    out.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"#333333\" stroke-width=\"1\"/>\n",
        width - RIGHT
    ));
}

/// A power of ten as an axis label: "1", "100", "10k", "1M".
fn decade_text(exp: i32) -> String {
    match exp {
        e if e < 0 => format!("{}", 10f64.powi(e)),
        e if e < 3 => format!("{}", 10u64.pow(e as u32)),
        e if e < 6 => format!("{}k", 10u64.pow((e - 3) as u32)),
        e if e < 9 => format!("{}M", 10u64.pow((e - 6) as u32)),
        e => format!("{}G", 10u64.pow((e - 9).min(9) as u32)),
    }
}

/// A `<text>` element.
fn text(x: f64, y: f64, size: f64, anchor: &str, weight: &str, s: &str) -> String {
    format!(
        "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" text-anchor=\"{anchor}\" \
         font-weight=\"{weight}\" fill=\"#222222\">{}</text>\n",
        escape(s)
    )
}

/// `s` with XML's special characters escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::super::cells::full;
    use super::super::results::Measurement;
    use super::*;

    #[test]
    fn the_chart_has_a_bar_per_result_and_a_panel_per_mode() {
        let results: Vec<CellResult> = full()
            .into_iter()
            .map(|cell| {
                let mut r = CellResult::new(cell);
                r.by_target.insert(
                    TargetKind::Iris,
                    Ok(Measurement {
                        iops: 400_000.0,
                        mean_ns: 2000.0,
                        p99_ns: 3000.0,
                    }),
                );
                r.by_target.insert(TargetKind::Ext4, Err("failed".into()));
                r
            })
            .collect();
        let doc = svg(
            &results,
            &[TargetKind::Iris, TargetKind::Ext4],
            &["a <machine>".to_string()],
        );
        assert!(doc.starts_with("<svg ") && doc.ends_with("</svg>\n"));
        assert_eq!(doc.matches("<title>").count(), 21);
        assert_eq!(doc.matches("×</text>").count(), 21);
        for mode in Mode::ALL {
            assert!(doc.contains(mode.title()));
        }
        assert!(doc.contains("a &lt;machine&gt;"));
        assert_eq!(decade_text(4), "10k");
        assert_eq!(decade_text(6), "1M");
    }
}
