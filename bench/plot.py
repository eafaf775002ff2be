"""Draws the per-line delay distributions of a hangar-bench result (scenarios 1, 5, 6, 9 and 10) as one PNG.

Usage: plot.py RESULT.json OUT.png. Reads only the JSON hangar-bench wrote, so a plot can be
redrawn from committed results.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def cdf(ax, percentiles, label):
    # The 0th..100th percentiles, as a cumulative distribution.
    ax.plot(percentiles, range(len(percentiles)), label=label, drawstyle="steps-post")


def main(src, dest):
    with open(src) as f:
        r = json.load(f)
    panels = [p for p in ("streaming", "scale", "turns", "agents", "claude") if r.get(p)]
    if not panels:
        print(f"plot.py: {src} has no streaming, scale, turns, agents or claude results: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel == "streaming":
            s = r["streaming"]
            for row in s["rows"]:
                cdf(ax, row["line_delay_ms"]["percentiles"], row["label"].replace("`", ""))
            ax.set_title(f"1. Each line's delay, {s['runs']} runs x {s['lines']} lines")
        elif panel == "turns":
            t = r["turns"]
            for row in t["rows"]:
                label = row["label"].replace("`", "")
                cdf(ax, row["recorded_ms"]["percentiles"], f"{label}: recorded")
                cdf(ax, row["delivered_ms"]["percentiles"], f"{label}: at the SSE client")
            ax.set_title(f"6. Turn events, {t['runs']} runs x {t['lines_with_events']} lines")
        elif panel == "agents":
            a = r["agents"]
            for row in a["rows"]:
                label = f"{row['provider']} {row['agents']} agents on {row['sandboxes']}, {row['pace']}"
                cdf(ax, row["recorded_ms"]["percentiles"], label)
            ax.set_title(f"9. The fleet under load: line to recorded, {a['seconds']:.0f} s a case")
        elif panel == "claude":
            c = r["claude"]
            for row in c["rows"]:
                cdf(ax, row["delay_ms"]["percentiles"], row["label"].replace("`", ""))
            ax.set_title(f"10. Claude Code {c['version']}: answer to line, {c['runs']} runs x {c['steps']} answers")
        else:
            s = r["scale"]
            d = s["line_delay_ms"]
            cdf(ax, d["percentiles"], "every line")
            cdf(ax, s["line_delay_all_open_ms"]["percentiles"], "lines printed while all were open")
            ax.set_title(f"5. Each line's delay, {s['streams']} streams ({d['n']} lines)")
        ax.set_xscale("log")
        what = "delay from a log line's writing" if panel in ("turns", "agents") else "delay from printing to arrival"
        if panel == "claude":
            what = "delay from the model's answer to the CLI's line"
        ax.set_xlabel(f"{what}, ms (log)")
        ax.set_ylabel("percentile")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    m = r["machine"]
    fig.suptitle(f"hangar {r['date'][:10]} ({r['mode']}): {m['cores']} cores, {m['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
