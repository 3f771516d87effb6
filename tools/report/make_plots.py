"""Turns the benchmark tools' result files into the plots docs/ shows.

    python tools/report/make_plots.py [--results docs/results] [--out docs/images]
        [--diagram docs/architecture.dot] [--only NAME,...]

(`./kvcast.sh report` runs it with the defaults, after installing matplotlib
and Graphviz.) Each plot reads one result file (tools/report/results.py),
draws the same-run baseline beside kvcast, and states the machine, date,
commit and tool under the axes; check_figure() refuses to save a plot
without a title, axis labels with units, a legend naming the baseline, or
the machine. The diagram is Graphviz dot rendered to SVG. Output is
byte-reproducible: no timestamps, fixed hash salt.
"""
import argparse
import os
import statistics
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results as result_files  # noqa: E402

matplotlib.rcParams.update({"svg.hashsalt": "kvcast", "font.size": 9, "axes.grid": True,
                            "grid.alpha": 0.3, "figure.dpi": 100})
KVCAST = "#1f5fbf"
BASELINE = "#d0701c"
OTHER = "#6a9a3a"


class PlotError(ValueError):
    pass


def median_range(values):
    """The median and the error-bar lengths below and above it (the range)."""
    m = statistics.median(values)
    return m, m - min(values), max(values) - m


def errorbar_ranges(ax, xs, samples, scale=1.0, **kw):
    """Each x's samples drawn as the median with the range as its bar."""
    m = [median_range([scale * v for v in vals]) for vals in samples]
    return ax.errorbar(xs, [x[0] for x in m], yerr=[[x[1] for x in m], [x[2] for x in m]],
                       capsize=3, **kw)


def machine_line(doc):
    cores = f", {doc['cores']} cores" if doc.get("cores") else ""
    return (f"Machine: {doc['cpu']}{cores} · {doc['date']} · commit {doc['commit']} · "
            f"{doc['tool']}")


def new_figure(doc, title, ncols=1, nrows=1, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(8, 4.8 if nrows == 1 else 6.2), **kw)
    fig.suptitle(title, fontsize=11, fontweight="bold")
    fig.text(0.01, 0.01, machine_line(doc), fontsize=7, color="#555555", ha="left", va="bottom")
    return fig, axes


def method_note(fig, text):
    """How the numbers were taken: a line above the machine line."""
    fig.text(0.01, 0.035, text, fontsize=7, color="#555555", ha="left", va="bottom")


def log2_axis(ax, ticks):
    """A base-2 log x axis labelled at `ticks` (prompt lengths, bit widths)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])


def check_figure(fig):
    """What a plot must say to be read without the text around it, legibly: a
    title, the machine, a legend naming kvcast and its baseline, axis labels
    with units, and no figure text cut off or on top of another."""
    problems = []
    if fig._suptitle is None or not fig._suptitle.get_text().strip():
        problems.append("no title")
    if not any(t.get_text().startswith("Machine: ") for t in fig.texts):
        problems.append("no machine line")
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None] + fig.legends
    if not any(len(l.get_texts()) >= 2 for l in legends):
        problems.append("no legend naming kvcast and its baseline")
    for i, ax in enumerate(fig.axes):
        for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
            if not label.strip():
                problems.append(f"axes {i}: no {axis} label")
            elif "(" not in label or not label.rstrip().endswith(")"):
                problems.append(f"axes {i}: {axis} label '{label}' has no unit in parentheses")
    renderer = fig.canvas.get_renderer()
    texts = [t for t in dict.fromkeys(fig.texts + ([fig._suptitle] if fig._suptitle else []))
             if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    for t, b in zip(texts, boxes):
        if b.x0 < 0 or b.x1 > fig.bbox.width or b.y0 < 0 or b.y1 > fig.bbox.height:
            problems.append(f"'{t.get_text()[:40]}' runs off the figure")
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            if boxes[i].overlaps(boxes[j]):
                problems.append(f"'{texts[i].get_text()[:30]}' overlaps "
                                f"'{texts[j].get_text()[:30]}'")
    if problems:
        raise PlotError("; ".join(problems))


def save(fig, path):
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    check_figure(fig)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


# --- the plots: each takes a result file's contents, returns a figure -----

def plot_llamacpp_by_length(doc):
    rows = doc["results"]
    lengths = sorted({r["prompt_tokens"] for r in rows})
    fig, axes = new_figure(doc, f"kvcast vs llama.cpp on the CPU by prompt length "
                                f"({doc.get('threads', 2)} threads each, same GGUF)", ncols=2)
    styles = {"kvcast": (KVCAST, "-", "o"), "llama.cpp": (BASELINE, "--", "s"),
              "llama.cpp FA": (OTHER, ":", "^")}
    labels = {"kvcast": "kvcast (Q8 kernels, fp16 KV)", "llama.cpp": "llama.cpp, flash attention off",
              "llama.cpp FA": "llama.cpp, flash attention on"}
    for ax, measurement, xlabel in ((axes[0], "prefill", "prompt length (tokens)"),
                                    (axes[1], "decode batch 1", "context length (tokens)")):
        for engine, (color, ls, marker) in styles.items():
            pts = [next(r for r in rows if r["prompt_tokens"] == n and r["engine"] == engine
                        and r["measurement"] == measurement)["tokens_per_s"] for n in lengths]
            errorbar_ranges(ax, lengths, pts, color=color, ls=ls, marker=marker,
                            label=labels[engine])
        log2_axis(ax, lengths)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{measurement} throughput (tokens/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(measurement, fontsize=9)
    axes[0].legend(fontsize=8)
    rounds = doc.get("rounds", len(rows[0]["tokens_per_s"]))
    method_note(fig, f"median of {rounds} alternating rounds, bars: range")
    return fig


def plot_llamacpp_by_batch(doc):
    rows = doc["results"]
    names = [r["measurement"] for r in rows if r["engine"] == "kvcast"]
    batches = [int(n.split()[-1]) for n in names if n.startswith("decode batch")]
    fig, (ax, ratio) = new_figure(doc, f"Decode throughput against concurrency: kvcast vs "
                                       f"llama.cpp on the CPU\n{doc.get('threads', 2)} threads, "
                                       f"{doc.get('prompt_tokens', 512)}-token context", ncols=2)
    per = {}
    for engine, color, ls, marker in (("kvcast", KVCAST, "-", "o"),
                                      ("llama.cpp", BASELINE, "--", "s")):
        vals = [next(r["tokens_per_s"] for r in rows if r["engine"] == engine
                     and r["measurement"] == f"decode batch {b}") for b in batches]
        per[engine] = vals
        errorbar_ranges(ax, batches, vals, color=color, ls=ls, marker=marker,
                        label="kvcast (continuous batching)" if engine == "kvcast"
                        else "llama.cpp (N sequences in one context)")
    log2_axis(ax, batches)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("sequences decoding together (batch)")
    ax.set_ylabel("decode throughput, all sequences (tokens/s)")
    ax.legend(fontsize=7, loc="upper left")
    errorbar_ranges(ratio, batches, [[a / b for a, b in zip(k, l)]
                                     for k, l in zip(per["kvcast"], per["llama.cpp"])],
                    color=KVCAST, marker="o", label="kvcast / llama.cpp, same round")
    ratio.axhline(1, color=BASELINE, ls="--", label="parity with llama.cpp")
    log2_axis(ratio, batches)
    ratio.set_ylim(bottom=0)
    ratio.set_xlabel("sequences decoding together (batch)")
    ratio.set_ylabel("kvcast / llama.cpp (ratio)")
    ratio.legend(fontsize=7, loc="lower right")
    method_note(fig, f"SmolLM2-135M Q4_1; median of {doc.get('rounds', '?')} alternating rounds, "
                     f"bars: range")
    return fig


def plot_kv_transport(doc):
    rows = [r for r in doc["results"] if "subscribers" not in r]
    tokens = max(r["tokens"] for r in rows)
    rows = [r for r in rows if r["tokens"] == tokens]
    tracks = [t for t in ("fp16", "int8") if any(r["track"] == t for r in rows)]

    def rate(track, case):
        return next((r["mib_per_s"] for r in rows if r["track"] == track and r["case"] == case),
                    None)
    groups = [("the same bytes,\nno KV codec", tracks[0], "moqt-bytes", "tls", None)]
    for t in tracks:
        groups.append((f"{t} KV pages,\nencoded and landed", t, "direct", "tls-kv", "relay"))
    fig, ax = new_figure(doc, f"KV transport: MoQT over QUIC vs TLS 1.3 over TCP\n"
                              f"{tokens} tokens of Llama-3-8B-shaped KV, on loopback")
    width = 0.27
    series = ((0, "MoQT over QUIC (kvcast), direct", KVCAST),
              (1, "TLS 1.3 over TCP (baseline), same work", BASELINE),
              (2, "MoQT through a relay, live", OTHER))
    for k, label, color in series:
        xs, meds, lo, hi = [], [], [], []
        for i, (_, track, ours, base, relay) in enumerate(groups):
            v = rate(track, (ours, base, relay)[k])
            if v:
                m = median_range(v)
                xs.append(i + (k - 1) * width)
                meds.append(m[0])
                lo.append(m[1])
                hi.append(m[2])
        ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, color=color, label=label)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[0] for g in groups])
    ax.set_xlabel("what is carried (one prompt's KV per transfer)")
    ax.set_ylabel("throughput (MiB/s)")
    ax.legend(fontsize=8, loc="upper right")
    method_note(fig, f"median of {doc.get('rounds', '?')} alternating rounds, bars: range")
    return fig


def plot_kv_quality(doc):
    # The tracks and tunings a worker sends (not the sweeps' explored
    # points, "ac@K/V...", nor ac with channel weights, which it does not,
    # nor the rotation study's "int4+rot", now the wire's "int4-rot").
    rows = [r for r in doc["results"] if "@" not in r["track"] and r["track"] != "ac+tuned+kw"
            and not r["track"].endswith("+rot")]
    fig, ax = new_figure(doc, f"Compressed KV on natural text: size against perplexity "
                              f"({doc['windows']} windows of {doc['prefix']} + "
                              f"{doc['continuation']} tokens)")
    modes = (("product", "as shipped: the prompt's KV through the track", KVCAST, "o"),
             ("all-kv", "stress: every K/V row through the track", BASELINE, "s"))
    for mode, label, color, marker in modes:
        pts = sorted((r for r in rows if r["mode"] == mode and r["bits_per_value"] < 16),
                     key=lambda r: r["bits_per_value"])
        if not pts:
            continue
        xs = [r["bits_per_value"] for r in pts]
        ys = [100 * r["ppl_change"] for r in pts]
        err = [[100 * (r["ppl_change"] - r["ppl_change_lo"]) for r in pts],
               [100 * (r["ppl_change_hi"] - r["ppl_change"]) for r in pts]]
        ax.errorbar(xs, ys, yerr=err, ls="none", marker=marker, color=color, capsize=3,
                    label=f"{label}")
        left = mode == "product"  # labels left of the shipped points, right of the stress ones
        for r, x, y in zip(pts, xs, ys):
            ax.annotate(r["track"], (x, y), textcoords="offset points",
                        xytext=(-6 if left else 6, 0), ha="right" if left else "left",
                        va="center", fontsize=7, color=color)
    top = max(100 * r["ppl_change_hi"] for r in rows)
    ax.set_ylim(top=top * 3 if top > 0 else 1)
    ax.axhline(0, color="#333333", lw=1, ls="--", label="fp16 (16 bits per value): exact")
    log2_axis(ax, [2, 3, 4, 6, 8, 12, 16])
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("size (bits per KV value, with scales and tables)")
    ax.set_ylabel("perplexity change vs exact KV (%)")
    ax.legend(fontsize=8, loc="upper right")
    method_note(fig, f"{os.path.basename(doc['model'])}, backend {doc['backend']}; "
                     f"bars: 95% bootstrap interval")
    return fig


def plot_kv_tiers(doc):
    rows = doc["results"]
    prefixes = sorted({r["prefix_tokens"] for r in rows})
    tiers = [t for t in ("pool", "host-fp16", "host-int8", "disk-fp16", "relay", "recompute")
             if any(r["tier"] == t for r in rows)]
    names = {"pool": "page pool (tier 0: GPU, or host here)", "host-fp16": "host memory, fp16 (tier 1)",
             "host-int8": "host memory, int8 (tier 1)", "disk-fp16": "local disk, fp16 (tier 2)",
             "relay": "MoQT relay's cache (another worker's)",
             "recompute": "not cached: recompute (baseline)"}
    fig, ax = new_figure(doc, f"Time to first token by where a reused prefix's KV is "
                              f"(prefix + {doc.get('tail_tokens', '?')} new tokens)")
    for tier in tiers:
        runs = [next(r["ttft_s"] for r in rows if r["prefix_tokens"] == n and r["tier"] == tier)
                for n in prefixes]
        base = tier == "recompute"
        errorbar_ranges(ax, prefixes, runs, scale=1e3, marker="s" if base else "o",
                        lw=2.5 if base else 1.2, color=BASELINE if base else None,
                        ls="--" if base else "-", label=names[tier])
    log2_axis(ax, prefixes)
    ax.set_yscale("log")
    ax.set_xlabel("reused prefix (tokens)")
    ax.set_ylabel("time to first token (ms)")
    ax.legend(fontsize=8)
    method_note(fig, f"{os.path.basename(doc['model'])}, backend {doc['backend']}; "
                     f"median of {doc.get('runs', '?')} runs, bars: range")
    return fig


def plot_planner_day(doc):
    runs = {r["scaling"]: r for r in doc["results"]}
    fig, (top, bottom) = new_figure(doc, "SLO planner over a simulated day: workers against "
                                         "load", nrows=2, sharex=True)
    # Whole intervals only (the day's last one may be cut short).
    whole = [iv for iv in runs["planner"]["timeline"]
             if iv["t_s"] + doc["interval_s"] <= doc["day_s"]]
    top.plot([iv["t_s"] / 3600 for iv in whole], [iv["arrivals_per_s"] for iv in whole],
             color="#444444", lw=1, label="arrivals per interval")
    top.axvline(doc["day_s"] / 3600 / 2, color="#aa0000", ls=":", lw=1,
                label="prompts shift (longer, less reuse)")
    top.set_ylabel("arrivals (requests/s)")
    top.set_xlabel("time of day (h)")
    top.legend(fontsize=8, loc="upper left")
    fixed = runs["fixed"]
    fixed_h = fixed["prefill_worker_hours"] + fixed["decode_worker_hours"]

    def label(run, name):
        h = run["prefill_worker_hours"] + run["decode_worker_hours"]
        return (f"{name}: {100 * run['slo_met']:.2f}% in SLO, "
                f"{100 * (h / fixed_h - 1):+.1f}% worker-hours")
    for key, name, color, ls in (("planner", "planner (kvcast)", KVCAST, "-"),
                                 ("hpa", "CPU HPA (baseline)", BASELINE, "--")):
        run = runs.get(key)
        if run is None:
            continue
        ts = [iv["t_s"] / 3600 for iv in run["timeline"]]
        bottom.step(ts, [iv["prefill"] + iv["decode"] for iv in run["timeline"]], where="post",
                    color=color, ls=ls, label=label(run, name))
    bottom.axhline(fixed["prefill"] + fixed["decode"], color="#333333", ls=":",
                   label=label(fixed, f"best fixed split in hindsight "
                                      f"({fixed['prefill']}+{fixed['decode']})"))
    bottom.set_ylabel("prefill + decode workers (workers)")
    bottom.set_xlabel("time of day (h)")
    bottom.set_ylim(bottom=0)
    bottom.legend(fontsize=7, loc="upper left")
    method_note(fig, f"virtual time; SLOs TTFT {doc['slo_ttft_ms']:.0f} ms, mean ITL "
                     f"{doc['slo_itl_ms']:.0f} ms")
    return fig


def plot_planner_on_machine(doc):
    ivs = doc["results"]
    t = [iv["t_s"] for iv in ivs]
    w = doc["interval_s"]
    fig, (load, workers, lat) = new_figure(
        doc, f"SLO planner on one machine: a stepped load on `kvcast cluster up --autoscale`\n"
             f"{doc['model']}, {doc['requests']} chat requests through the OpenAI API",
        nrows=3, sharex=True)
    fig.set_size_inches(8, 7.5)
    load.bar(t, [iv["arrivals_per_s"] for iv in ivs], width=w, align="edge", color="#999999",
             label="arrivals")
    load.bar(t, [iv["failed"] / w for iv in ivs], width=w, align="edge", color="#aa0000",
             label="failed")
    load.set_ylabel("requests (per s)")
    load.set_xlabel("time (s)")
    load.legend(fontsize=7, loc="upper right")
    for role, color in (("prefill", KVCAST), ("decode", OTHER)):
        workers.step(t, [iv[f"{role}_workers"] for iv in ivs], where="post", color=color,
                     label=f"{role} workers registered")
        workers.step(t, [iv[f"{role}_desired"] for iv in ivs], where="post", color=color,
                     ls=":", label=f"{role}: planner's desired replicas")
    workers.set_ylabel("workers (count)")
    workers.set_xlabel("time (s)")
    top = max((iv[k] or 0) for iv in ivs for k in iv if k.endswith(("_workers", "_desired")))
    workers.set_ylim(0, top + 2.5)  # room for the legend above the lines
    workers.legend(fontsize=7, loc="upper left", ncol=2)
    for key, name, color, slo in (("ttft_p99_ms", "TTFT p99", KVCAST, doc["slo_ttft_ms"]),
                                  ("itl_p99_ms", "ITL p99", OTHER, doc["slo_itl_ms"])):
        pts = [(x + w / 2, iv[key]) for x, iv in zip(t, ivs) if iv[key] is not None]
        lat.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=color,
                 label=name)
        lat.axhline(slo, color=color, ls="--", lw=1, label=f"{name} SLO ({slo:.0f} ms)")
    lat.set_yscale("log")
    lat.set_ylabel("latency per interval (ms)")
    lat.set_xlabel("time (s)")
    lat.legend(fontsize=7, loc="upper right", ncol=2)
    ok = doc["requests"] - doc["failed"]
    clean = sum(1 for d in doc["drains"] if d["reported"] and not d["pages_held"])
    method_note(fig, f"{doc['requests']} requests, {ok} ok; {clean} of {len(doc['drains'])} "
                     f"workers drained with every KV page free; {w:.0f}-s intervals, planner "
                     f"every {doc['planner_s']:.0f} s")
    return fig


def plot_relay_fanout(doc):
    fan = sorted((r for r in doc["results"] if "subscribers" in r), key=lambda r: r["subscribers"])
    direct = [r for r in doc["results"] if r.get("case") == "direct" and r["track"] == fan[0]["track"]]
    n = [r["subscribers"] for r in fan]
    fig, (rate, sent) = new_figure(doc, f"A MoQT relay fanning one {fan[0]['track']} KV track out "
                                        f"({fan[0]['tokens']} tokens, "
                                        f"{fan[0]['mib'] / fan[0]['subscribers']:.0f} MiB), loopback",
                                   ncols=2)
    errorbar_ranges(rate, n, [r["mib_per_s"] for r in fan], marker="o", color=KVCAST,
                    label="through the relay: delivered to all")
    if direct:
        d = statistics.median(direct[-1]["mib_per_s"])
        rate.axhline(d, color=BASELINE, ls="--",
                     label=f"no relay: one subscriber, {direct[-1]['tokens']} tokens")
    log2_axis(rate, n)
    rate.set_ylim(bottom=0)
    rate.set_xlabel("subscribers (count)")
    rate.set_ylabel("KV delivered, all subscribers (MiB/s)")
    rate.legend(fontsize=7, loc="lower right")
    sent.plot(n, [statistics.median(r["publisher_copies"]) for r in fan], marker="o",
              color=KVCAST, label="through the relay (measured)")
    sent.plot(n, n, ls="--", color=BASELINE, label="no relay: a copy per subscriber")
    log2_axis(sent, n)
    sent.set_xlabel("subscribers (count)")
    sent.set_ylabel("publisher sent (copies of the track)")
    sent.legend(fontsize=7, loc="upper left")
    method_note(fig, f"median of {doc.get('rounds', '?')} alternating rounds, bars: range")
    return fig


def plot_kv_abr(doc):
    runs = {r["run"]: r for r in doc["results"] if "per_group" in r}
    abr = [r for r in runs.values() if r["mode"] == "abr"]
    fixed = [r for r in runs.values() if r["mode"] != "abr"]
    ladder = ["ac-lo", "ac", "int8", "fp16"]  # fewest bytes at the bottom
    fig, ax = new_figure(doc, f"Adaptive bitrate: the track of each 128-token group as the link "
                              f"steps {doc['high_mbps']} -> {doc['low_mbps']} -> "
                              f"{doc['high_mbps']} Mbit/s\n{abr[0]['tokens']}-token prompt, "
                              f"{doc['layers']} layers of Llama-like KV, budget "
                              f"{doc['budget_ms'] / 1000:g} s")
    ax.axvspan(doc["low_from_s"], doc["low_until_s"], color="#f2dede",
               label=f"link at {doc['low_mbps']} Mbit/s")
    for i, (r, marker) in enumerate(zip(sorted(abr, key=lambda r: r["run"]), "os^")):
        ax.plot([g["at"] for g in r["per_group"]],
                [ladder.index(g["track"]) + 0.12 * (i - 0.5) for g in r["per_group"]],
                ls="none", marker=marker, color=(KVCAST, OTHER, "#8a3ab9")[i],
                label=f"ABR ({r['run']}): done in {r['seconds']:.2f} s, "
                      f"{r['bytes'] / 1e6:.0f} MB")
    for r, ls in zip(sorted(fixed, key=lambda r: r["run"]), ("--", ":")):
        ax.axvline(r["seconds"], color=BASELINE, ls=ls,
                   label=f"{r['mode']} alone (baseline): done in {r['seconds']:.2f} s, "
                         f"{r['bytes'] / 1e6:.0f} MB")
    ax.set_yticks(range(len(ladder)))
    ax.set_yticklabels(ladder)
    ax.set_ylim(-0.6, len(ladder) + 1.1)  # the top rows hold the legend
    ax.set_xlim(left=0)
    ax.set_xlabel("when the group landed (s)")
    ax.set_ylabel("track of the group (codec)")
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    method_note(fig, f"{doc['shaper']} shaper between two network namespaces; the ABR's ladder "
                     f"fp16, ac, ac-lo; one run each")
    return fig


def plot_chaos(doc):
    rows = doc["results"]
    fig, ax = new_figure(doc, f"Chaos campaign: time to serve again after each fault, under load "
                              f"({doc['load']['requests']} requests at {doc['load']['rate']}/s)")
    fig.set_size_inches(8, 6)
    names = [r["scenario"] for r in rows][::-1]
    for i, r in enumerate(rows[::-1]):
        base = r["scenario"] == "baseline"
        ax.barh(i, max(r["recovery_s"], 0.005), color=BASELINE if base else KVCAST,
                label=("no fault (baseline)" if base else None))
        leaked = sum(r["leaked_pages"].values()) if r["leaked_pages"] else 0
        ax.annotate(f"{r['recovery_s']:.2f} s; {r['ok']} ok, {r['failed']} failed, {r['hung']} hung, "
                    f"{leaked} pages leaked",
                    (max(r["recovery_s"], 0.005), i), textcoords="offset points", xytext=(4, 0),
                    va="center", fontsize=6.5, color="#333333")
    ax.barh([], [], color=KVCAST, label="a fault 1 s into the load")
    ax.axvline(doc["freeze_s"], color="#aa0000", ls=":", lw=1,
               label=f"how long a SIGSTOP or a partition lasts ({doc['freeze_s']} s)")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.set_xlim(0, max(max(r["recovery_s"] for r in rows), doc["freeze_s"]) * 1.9)
    ax.set_xlabel("recovery: from the fault until a new request succeeds (s)")
    ax.set_ylabel("fault (scenario)")
    ax.legend(fontsize=7, loc="lower right")
    method_note(fig, "each scenario on a fresh `kvcast cluster up` (2 prefill + 2 decode workers, "
                     "a relay, the tiny model); tests/e2e_python/chaos_test.py")
    return fig


# name -> (result file, plot function). The PNG is docs/images/NAME.png.
PLOTS = {
    "llamacpp_by_length": ("llamacpp_by_length.json", plot_llamacpp_by_length),
    "llamacpp_by_batch": ("llamacpp_by_batch.json", plot_llamacpp_by_batch),
    "kv_transport": ("kv_transport.json", plot_kv_transport),
    "relay_fanout": ("kv_transport.json", plot_relay_fanout),
    # Every track of the first file; each later file's, where present (the
    # K-only tuning's run, the K channel weights', the rotated 4-bit
    # tracks'), added, replacing rows of the same track and mode.
    "kv_quality": (("kv_quality_lee.json", "kv_quality_lee_tuned.json", "kv_quality_lee_kw.json",
                    "kv_quality_rot_wire.json"),
                   plot_kv_quality),
    "kv_tiers": ("kv_tiers.json", plot_kv_tiers),
    "kv_abr": ("kv_abr.json", plot_kv_abr),
    "planner_day": ("planner_day.json", plot_planner_day),
    "planner_on_machine": ("planner_on_machine.json", plot_planner_on_machine),
    "chaos": ("chaos.json", plot_chaos),
}


def load_doc(results_dir, name):
    """The result document plot `name` draws, and the files it came from."""
    file = PLOTS[name][0]
    files = file if isinstance(file, tuple) else (file,)
    doc = result_files.load(os.path.join(results_dir, files[0]))
    used = [files[0]]
    for more in files[1:]:
        path = os.path.join(results_dir, more)
        if not os.path.exists(path):
            continue
        extra = result_files.load(path)["results"]
        replaced = {(r["track"], r["mode"]) for r in extra}
        doc["results"] = [r for r in doc["results"] if (r["track"], r["mode"]) not in replaced] + extra
        used.append(more)
    return doc, " + ".join(used)


def render(results_dir, out_dir, only=None):
    """Renders every plot (or those named in `only`); returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, (file, fn) in PLOTS.items():
        if only and name not in only:
            continue
        doc, file = load_doc(results_dir, name)
        path = os.path.join(out_dir, f"{name}.png")
        save(fn(doc), path)
        written.append(path)
        print(f"[report] {path} from {file}", file=sys.stderr)
    return written


def render_diagram(dot_file, out_dir):
    path = os.path.join(out_dir, os.path.splitext(os.path.basename(dot_file))[0] + ".svg")
    subprocess.run(["dot", "-Tsvg", dot_file, "-o", path], check=True)
    print(f"[report] {path} from {dot_file}", file=sys.stderr)
    return path


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--out", default="docs/images")
    ap.add_argument("--diagram", default="docs/architecture.dot",
                    help="Graphviz source rendered to OUT/NAME.svg ('' for none)")
    ap.add_argument("--only", default="", help="comma-separated plot names")
    a = ap.parse_args(argv)
    only = set(filter(None, a.only.split(",")))
    unknown = only - set(PLOTS)
    if unknown:
        ap.error(f"--only: no plot named {', '.join(sorted(unknown))} (have: {', '.join(PLOTS)})")
    try:
        render(a.results, a.out, only)
        if a.diagram and not only:
            render_diagram(a.diagram, a.out)
    except (OSError, result_files.ResultError, PlotError, subprocess.CalledProcessError) as e:
        print(f"make_plots: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
