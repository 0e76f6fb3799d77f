"""Plot of a merged comparison (report.merge): measured throughput per flow, one bar per kernel (or file, host)."""

from pathlib import Path


def plot_comparison(comparison, directory, labels=None):
    """Write comparison.png (horizontal bars: measured per flow and group, model prediction as a tick); return [path].

    labels: one y-axis label per flow (default: the test's name, flow number and link).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    groups, flows = comparison.groups, comparison.flows
    height = 0.8 / max(1, len(groups))
    figure, axes = pyplot.subplots(figsize=(10, 1.8 + 0.45 * len(flows) * max(1, len(groups)) ** 0.5))
    if labels is None:
        labels = [
            f"{row.get('test', '').rsplit('::', 1)[-1]} #{row.get('flow', 0)}\n"
            f"{(row.get('link') or {}).get('describe', '')}"
            for _, row in flows
        ]
    for number, group in enumerate(groups):
        positions, measured, expected = [], [], []
        for index, (key, _) in enumerate(flows):
            at = comparison.rows_at(key, group)
            values = sorted(r["measured_bps"] for r in at if isinstance(r.get("measured_bps"), (int, float)))
            if not values:
                continue
            positions.append(index + (number - (len(groups) - 1) / 2) * height)
            measured.append(values[len(values) // 2] / 1e6)
            predictions = [r["expected_bps"] for r in at if isinstance(r.get("expected_bps"), (int, float))]
            expected.append(predictions[-1] / 1e6 if predictions else None)
        axes.barh(positions, measured, height=height * 0.9, label=f"{comparison.by} {group}: measured")
        marked = [(p, e) for p, e in zip(positions, expected) if e is not None]
        if marked:
            axes.plot(
                [e for _, e in marked],
                [p for p, _ in marked],
                "k|",
                markersize=12,
                label="model prediction" if number == 0 else None,
            )
    axes.set_yticks(range(len(flows)), labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("goodput (Mbit/s)")
    axes.set_title(f"pytest-tcpnet: measured goodput per flow, by {comparison.by}")
    axes.set_xlim(left=0)
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(groups) + 1, frameon=False)
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    path = directory / "comparison.png"
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return [path]
