"""The review page of `taco annotate --report OUT.html`: one self-contained HTML file (no server,
no network: the data sit in the page as JSON, drawn by its own script) to check an annotation.

What it shows:

- a header: the dataset, model and decoder, the mean and lowest confidence, and the agreement
  with the labels already in the dataset (the figure the command prints) where it has any;
- a legend: each sub-task's colour (by its name: the same in every episode; a name that is a
  colour word, as Nav-World's are, gets that colour, the others a fixed palette in the
  vocabulary's order), the posterior's colour scale (0 to 1) and the boundary marker;
- the episodes to review first: those whose confidence is below the stated threshold
  (REVIEW_BELOW unless the command gives another), least confident first and at most the
  command's --review of them, and those whose labels are not an alignment path or lag the
  actions (with the reason); where no episode is below the threshold the page says so;
- per episode: its key, task string and sketch; the posterior over sketch positions against
  time (a heat map: one row per sketch position, labelled with its sub-task, darker = more
  probable, with its colour scale beside it and a time axis in frames below), the labels the
  decoder chose (a strip of each sub-task's colour), the boundaries as markers above the heat
  map (never drawn over it); the confidence (the expected share of frames labelled as the
  posterior has them); and, where the dataset has camera images that can be read without a
  video decoder, the frames at each boundary and at both ends;
- a table of every episode with its confidence, least confident first.

The page holds at most MAX_DETAILED episodes in detail (the review list first, then the others
in the dataset's order) and a posterior of at most MAX_COLUMNS time columns each (averaged over
equal runs of frames), so that its size stays bounded for any dataset; the table lists all.

Symbol | Shape | Meaning
T      |       | frames of an episode
L      |       | its sketch length
C      |       | time columns kept, min(T, MAX_COLUMNS)
"""
import base64
import html
import json
import os
import struct
import zlib

import numpy as np

from taco_ref.plumbing import files

MAX_COLUMNS = 240
"""Time columns of a posterior kept in the page."""
MAX_DETAILED = 200
"""Episodes drawn in detail."""
MAX_IMAGES = 6
"""Frames shown per episode (the boundaries first, then the ends)."""
REVIEW_BELOW = 0.95
"""An episode whose confidence is below this is listed for review first: one frame in twenty
expected to be labelled otherwise, where a boundary as likely at one frame as at the next costs
0.5 / T (0.01 at T = 50)."""

NAMED_COLOURS = {"red": "#d62728", "green": "#2ca02c", "blue": "#1f77b4", "yellow": "#e8c31a",
                 "orange": "#ff7f0e", "purple": "#9467bd", "violet": "#9467bd", "brown": "#8c564b",
                 "pink": "#e377c2", "grey": "#7f7f7f", "gray": "#7f7f7f", "black": "#222222",
                 "white": "#ffffff", "cyan": "#17becf", "magenta": "#c2188f"}
"""The colour of a sub-task named after one (Nav-World's black, green, yellow, red)."""
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
           "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
"""The colours of the other sub-tasks, in the vocabulary's order (colours a named sub-task
already has are skipped; past the last, they repeat)."""


def png_bytes(image):
    """A (H, W) or (H, W, C) uint8 image (C = 1, 3 or 4) as PNG file bytes (no dependency)."""
    img = np.ascontiguousarray(np.asarray(image, dtype=np.uint8))
    if img.ndim == 2:
        img = img[:, :, None]
    h, w, c = img.shape
    color = {1: 0, 3: 2, 4: 6}[c]

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))           # filter 0 per row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def data_uri(blob):
    """An image file's bytes as a data: URI (PNG or JPEG, by signature)."""
    mime = "image/jpeg" if blob[:3] == b"\xff\xd8\xff" else "image/png"
    return f"data:{mime};base64," + base64.b64encode(blob).decode("ascii")


def compact_posterior(posterior):
    """(T, L) probabilities -> (C, L) uint8 (0-255), each column the mean of an equal run of
    frames."""
    p = np.asarray(posterior, dtype=np.float64)                              # (T, L)
    T = p.shape[0]
    C = min(T, MAX_COLUMNS)
    edges = np.linspace(0, T, C + 1).round().astype(int)                    # (C + 1,)
    cols = np.stack([p[edges[c]:max(edges[c + 1], edges[c] + 1)].mean(axis=0) for c in range(C)])  # (C, L)
    return np.clip(np.round(255 * cols), 0, 255).astype(np.uint8)


def boundaries(positions):
    """Frames at which the label changes (the first frame of each segment after the first)."""
    positions = np.asarray(positions)
    return [int(t) for t in np.nonzero(positions[1:] != positions[:-1])[0] + 1]


def segments(positions):
    """[[first frame, end frame (exclusive), sketch position]] of each run of equal labels."""
    positions = np.asarray(positions)
    starts = [0] + boundaries(positions)
    ends = starts[1:] + [len(positions)]
    return [[s, e, int(positions[s])] for s, e in zip(starts, ends) if e > s]


def subtask_colours(names):
    """{name: "#rrggbb"} for the sub-task names in the order given (the vocabulary's): a name
    that is a colour word (NAMED_COLOURS, any case) gets that colour, the others PALETTE's in
    order, skipping the colours the named ones took. One name, one colour, in every episode."""
    names = list(dict.fromkeys(str(n) for n in names))
    out = {n: NAMED_COLOURS[n.strip().lower()] for n in names if n.strip().lower() in NAMED_COLOURS}
    free = [c for c in PALETTE if c not in set(out.values())] or list(PALETTE)
    rest = [n for n in names if n not in out]
    out.update({n: free[i % len(free)] for i, n in enumerate(rest)})
    return {n: out[n] for n in names}


class Recorder:
    """What the page needs of each annotated episode, kept compact (Labeller calls add)."""

    def __init__(self):
        self.episodes = {}                      # key -> record (dict)

    def add(self, key, task, sketch, positions, posterior, confidence, monotone):
        cols = compact_posterior(posterior)                                  # (C, L)
        self.episodes[key] = {
            "key": str(key), "task": "" if task is None else str(task), "sketch": [str(s) for s in sketch],
            "T": int(len(positions)), "C": int(cols.shape[0]),
            "post": base64.b64encode(cols.tobytes()).decode("ascii"),
            "segs": segments(positions), "bounds": boundaries(positions),
            "confidence": round(float(confidence), 6), "path": bool(monotone)}


def frames_to_show(record):
    """The frames of an episode whose images the page shows, in time order: each boundary, then
    the first and the last frame, at most MAX_IMAGES."""
    picked = list(dict.fromkeys(record["bounds"] + [0, record["T"] - 1]))
    return sorted(picked[:MAX_IMAGES])


def review_first(records, notes, threshold=REVIEW_BELOW, limit=None):
    """The keys the page lists first, least confident first: the episodes whose confidence is
    below threshold (the limit least confident of them, all when limit is None) and every one
    with a note (labels that are not an alignment path, boundaries that lag the actions).
    records: {key: record}; notes: {key: the command's note}."""
    def rank(k):
        return (records[k]["confidence"], k)
    below = sorted((k for k, r in records.items() if r["confidence"] < threshold), key=rank)
    picked = set(below[:limit] if limit is not None else below) | {k for k in notes if k in records}
    return sorted(picked, key=rank)


def write_page(path, recorder, review, meta, images=None, vocab=None, threshold=REVIEW_BELOW, limit=None,
               agreement=None):
    """Write the page to path (atomically). review: the command's review list (dicts with
    "episode" and, where it was listed for a reason other than its confidence, "note"); meta:
    {label: value} for the header; images(key, frames) -> [(frame, data URI)] or None where the
    dataset has no readable camera images; vocab: the model's sub-task names (their order fixes
    the palette; None: the order the sketches name them in); threshold and limit: review_first's;
    agreement: (frames agreeing, frames compared) with the labels already in the dataset, or
    None where it has none to compare."""
    by_key = {str(k): rec for k, rec in recorder.episodes.items()}
    original = {str(k): k for k in recorder.episodes}                   # the dataset's own key
    notes = {str(r["episode"]): r["note"] for r in review if r.get("note")}
    order = review_first(by_key, notes, threshold, limit)
    listed = set(order)
    detailed = (order + [k for k in by_key if k not in listed])[:MAX_DETAILED]
    shown = []
    for k in detailed:
        rec = dict(by_key[k])
        rec["review"] = k in order
        rec["note"] = notes.get(k, "")
        if images is not None:
            rec["images"] = [{"frame": int(t), "src": src} for t, src in images(original[k], frames_to_show(rec))]
        shown.append(rec)
    table = sorted(({"key": k, "confidence": r["confidence"], "T": r["T"], "path": r["path"]}
                    for k, r in by_key.items()), key=lambda r: (r["confidence"], r["key"]))
    used = list(dict.fromkeys(s for r in by_key.values() for s in r["sketch"]))   # the sketches' names
    names = [str(n) for n in (vocab or []) if str(n) in set(used)]
    names = list(dict.fromkeys(names + used))                 # the vocabulary's order, then the rest
    conf = [r["confidence"] for r in by_key.values()]
    payload = {"meta": {str(k): str(v) for k, v in meta.items()}, "episodes": shown, "table": table,
               "review": order, "omitted": len(by_key) - len(detailed),
               "threshold": float(threshold), "limit": limit,
               "below": sum(c < threshold for c in conf), "lowest": min(conf) if conf else None,
               "noted": sum(k in notes for k in order),
               "colours": subtask_colours(names),
               "agreement": None if not agreement or not agreement[1] else
               {"share": agreement[0] / agreement[1], "frames": int(agreement[1])}}
    # every <, > and & as a JSON escape: "</" alone is not enough, "<!--<script>" in a task string
    # switches the HTML parser into the script's escaped state and swallows the page's own code
    data = (json.dumps(payload, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    title = html.escape(str(meta.get("dataset", "annotation")))
    files.write_bytes(path, PAGE.replace("%%TITLE%%", title).replace("%%DATA%%", data).encode("utf-8"))
    return {"out": os.fspath(path), "detailed": len(shown), "episodes": len(by_key), "review": len(order)}


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>taco annotate: %%TITLE%%</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1100px; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: .1em 1em; margin: 0; }
dl.meta dt { color: #666; }
.headline { font-size: 1.05em; margin: .6em 0; }
.headline b { font-size: 1.15em; }
#legend { border: 1px solid #ddd; border-radius: 6px; padding: .5em .8em; margin: .8em 0; }
#legend div { margin: .2em 0; }
#legend .what { color: #666; display: inline-block; min-width: 13em; margin-right: .5em; }
.then { color: #888; margin: 0 .3em 0 .05em; }
.hbar { display: inline-block; width: 160px; height: 12px; vertical-align: middle; margin: 0 .4em;
        background: linear-gradient(to right, #ffffff, rgb(20,40,120)); outline: 1px solid #999; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em .8em; margin: .8em 0; }
.card.flag { border-color: #d9822b; background: #fffaf3; }
.card h3 { font-size: 1em; margin: 0 0 .3em; }
.chip { display: inline-block; padding: 0 .5em; margin: 0 .25em .25em 0; border-radius: 3px;
        border: 1px solid rgba(0,0,0,.25); }
.swatch { display: inline-block; width: .8em; height: .8em; margin-right: .35em; vertical-align: -.05em;
          border: 1px solid rgba(0,0,0,.3); border-radius: 2px; }
.plot { display: grid; grid-template-columns: 9em 1fr 3.2em; column-gap: 6px; margin-top: .3em; }
.plot .rowlabels { display: flex; flex-direction: column; }
.plot .rowlabel { font-size: 12px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
                  text-align: right; display: flex; align-items: center; justify-content: flex-end; }
.plot .rowlabel .n { color: #888; margin-right: .3em; }
.plot .side { font-size: 11px; color: #666; text-align: right; align-self: center; white-space: nowrap; }
canvas.heat { display: block; width: 100%; height: 100%; image-rendering: pixelated; background: #fff;
              outline: 1px solid #999; }
.marks, .strip, .axis { position: relative; }
.bmark { position: absolute; bottom: 1px; transform: translateX(-50%); font-size: 10px; line-height: 1;
         color: #b02020; text-align: center; white-space: nowrap; }
.bmark i { display: block; width: 0; height: 0; margin: 1px auto 0; border-left: 5px solid transparent;
           border-right: 5px solid transparent; border-top: 7px solid #b02020; }
.strip { outline: 1px solid #999; }
.seg { position: absolute; top: 0; bottom: 0; }
.axis { border-top: 1px solid #444; font-size: 11px; color: #444; }
.tick { position: absolute; top: 0; transform: translateX(-50%); padding-top: 5px; }
.tick::before { content: ""; position: absolute; top: 0; left: 50%; height: 4px; border-left: 1px solid #444; }
.scale { position: relative; }
.scale .bar { position: absolute; left: 0; top: 0; bottom: 0; width: 10px; outline: 1px solid #999;
              background: linear-gradient(to top, #ffffff, rgb(20,40,120)); }
.scale span { position: absolute; left: 14px; font-size: 10px; color: #444; line-height: 1; }
.scale-title { font-size: 10px; color: #666; align-self: end; }
.frames { display: flex; flex-wrap: wrap; gap: .5em; margin-top: .4em; }
.frames figure { margin: 0; font-size: 12px; color: #666; text-align: center; }
.frames img { display: block; height: 96px; }
table { border-collapse: collapse; }
td, th { padding: .1em .7em; border-bottom: 1px solid #eee; text-align: left; }
.low { color: #b3500a; font-weight: 600; }
</style>
</head>
<body>
<h1>Sub-task annotation: %%TITLE%%</h1>
<dl class="meta" id="meta"></dl>
<p class="headline" id="agreement"></p>
<div id="legend"></div>
<h2 id="review-heading">Review first</h2>
<p id="review-intro"></p>
<div id="review"></div>
<h2>The other episodes</h2>
<div id="others"></div>
<p id="omitted"></p>
<h2>Every episode, least confident first</h2>
<table id="table"><thead><tr><th>episode</th><th>confidence</th><th>frames</th><th>labels</th></tr></thead>
<tbody></tbody></table>
<script type="application/json" id="data">%%DATA%%</script>
<script>
(function () {
  var data = JSON.parse(document.getElementById("data").textContent);
  var HI = [20, 40, 120];                     // the posterior's colour at 1 (white at 0)
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function colour(name) { return data.colours[name] || "#888888"; }
  function ink(hex) {                         // dark text on a light colour, white on a dark one
    var n = parseInt(hex.slice(1), 16), r = n >> 16, g = (n >> 8) & 255, b = n & 255;
    return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#111" : "#fff";
  }
  function chip(name) {
    var c = el("span", {"class": "chip", "data-subtask": name}, name);
    c.style.background = colour(name); c.style.color = ink(colour(name));
    return c;
  }
  function swatch(name) {
    var s = el("span", {"class": "swatch"}); s.style.background = colour(name); return s;
  }
  var thr = data.threshold, fmt = function (x) { return x.toFixed(4); };
  var meta = document.getElementById("meta");
  Object.keys(data.meta).forEach(function (k) {
    meta.appendChild(el("dt", {}, k)); meta.appendChild(el("dd", {}, data.meta[k]));
  });
  var agree = document.getElementById("agreement");
  if (data.agreement) {
    agree.appendChild(document.createTextNode("Agreement with the labels already in the dataset: "));
    agree.appendChild(el("b", {}, (100 * data.agreement.share).toFixed(2) + " %"));
    agree.appendChild(document.createTextNode(" of " + data.agreement.frames + " frames."));
  } else {
    agree.textContent = "Agreement not measured: the dataset holds no labels for these sketches to compare with.";
  }

  var legend = document.getElementById("legend");
  var row = el("div", {id: "legend-subtasks"});
  row.appendChild(el("span", {"class": "what"}, "sub-tasks (one colour each)"));
  Object.keys(data.colours).forEach(function (n) { row.appendChild(chip(n)); });
  legend.appendChild(row);
  row = el("div", {id: "legend-scale"}); row.appendChild(el("span", {"class": "what"}, "heat map: posterior"));
  row.appendChild(el("span", {}, "0")); row.appendChild(el("span", {"class": "hbar"}));
  row.appendChild(el("span", {}, "1"));
  row.appendChild(el("span", {}, " (probability that the frame belongs to the row's sketch step)"));
  legend.appendChild(row);
  row = el("div"); row.appendChild(el("span", {"class": "what"}, "boundary"));
  var m = el("span", {"class": "bmark", style: "position: static; display: inline-block; transform: none"});
  m.appendChild(el("i")); row.appendChild(m);
  row.appendChild(el("span", {}, " frame n (above the heat map) starts the next sub-task; strip below the " +
                                 "heat map: the labels written; axis: time in frames"));
  legend.appendChild(row);

  function decode(b64) {
    var s = atob(b64), out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  function pct(t, T) { return (100 * t / T).toFixed(3) + "%"; }
  function ticks(T) {                         // about 8 round frame numbers from 0 to T
    var raw = T / 8, p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1)))), step = p;
    [1, 2, 5, 10].some(function (f) { step = f * p; return step >= raw; });
    var out = [];
    for (var t = 0; t <= T; t += step) out.push(t);
    if (T - out[out.length - 1] > step / 2) out.push(T);
    return out;
  }
  function plot(ep) {
    var L = ep.sketch.length, C = ep.C, T = ep.T, rowH = Math.max(18, Math.ceil(48 / L)), H = L * rowH;
    var g = el("div", {"class": "plot"});
    g.style.gridTemplateRows = "22px " + H + "px 12px 26px";
    g.appendChild(el("div", {"class": "side"}, "boundaries"));
    var marks = el("div", {"class": "marks"});
    ep.bounds.forEach(function (b) {
      var next = ep.segs.filter(function (s) { return s[0] === b; })[0];
      var mk = el("span", {"class": "bmark", "data-frame": String(b),
                           title: "boundary: frame " + b + " starts sketch step " + (next ? next[2] + 1 : "?")});
      mk.style.left = pct(b, T); mk.appendChild(el("b", {}, String(b))); mk.appendChild(el("i"));
      marks.appendChild(mk);
    });
    g.appendChild(marks);
    g.appendChild(el("div", {"class": "scale-title"}, "posterior"));
    var rows = el("div", {"class": "rowlabels"});
    ep.sketch.forEach(function (s, l) {
      var r = el("div", {"class": "rowlabel", "data-subtask": s, title: "sketch step " + (l + 1) + ": " + s});
      r.style.height = rowH + "px";
      r.appendChild(el("span", {"class": "n"}, String(l + 1))); r.appendChild(swatch(s));
      r.appendChild(el("span", {}, s)); rows.appendChild(r);
    });
    g.appendChild(rows);
    var c = el("canvas", {"class": "heat", width: C, height: L, "data-episode": ep.key});
    var ctx = c.getContext("2d"), img = ctx.createImageData(C, L), post = decode(ep.post);
    for (var t = 0; t < C; t++) {
      for (var l = 0; l < L; l++) {
        var v = post[t * L + l] / 255, o = 4 * (l * C + t);
        for (var k = 0; k < 3; k++) img.data[o + k] = Math.round(255 + (HI[k] - 255) * v);
        img.data[o + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    g.appendChild(c);
    var scale = el("div", {"class": "scale", "data-range": "0-1", title: "posterior probability, 0 (white) to 1"});
    scale.appendChild(el("div", {"class": "bar"}));
    var hi = el("span", {}, "1"); hi.style.top = "0"; scale.appendChild(hi);
    if (H >= 40) { var mid = el("span", {}, "0.5"); mid.style.top = "calc(50% - 5px)"; scale.appendChild(mid); }
    var lo = el("span", {}, "0"); lo.style.bottom = "0"; scale.appendChild(lo);
    g.appendChild(scale);
    g.appendChild(el("div", {"class": "side"}, "labels"));
    var strip = el("div", {"class": "strip"});
    ep.segs.forEach(function (s) {
      var name = ep.sketch[s[2]] === undefined ? "?" : ep.sketch[s[2]];
      var d = el("div", {"class": "seg", "data-subtask": name,
                         title: name + ": frames " + s[0] + "-" + (s[1] - 1)});
      d.style.left = pct(s[0], T); d.style.width = pct(s[1] - s[0], T); d.style.background = colour(name);
      strip.appendChild(d);
    });
    g.appendChild(strip);
    g.appendChild(el("div"));
    g.appendChild(el("div", {"class": "side"}, "time (frame)"));
    var axis = el("div", {"class": "axis", "data-frames": String(T)});
    ticks(T).forEach(function (t) {
      var tk = el("span", {"class": "tick"}, String(t)); tk.style.left = pct(t, T); axis.appendChild(tk);
    });
    g.appendChild(axis);
    g.appendChild(el("div"));
    return g;
  }
  function card(ep) {
    var d = el("div", {"class": "card" + (ep.review ? " flag" : ""), id: "ep-" + ep.key});
    d.appendChild(el("h3", {}, "episode " + ep.key + (ep.task ? ": " + ep.task : "")));
    var p = el("p");
    ep.sketch.forEach(function (s, i) {
      if (i) p.appendChild(el("span", {"class": "then"}, "\u2192"));
      p.appendChild(chip(s));
    });
    p.appendChild(el("span", {"class": ep.confidence < thr ? "low" : ""},
                     " confidence " + fmt(ep.confidence) + (ep.note ? " (" + ep.note + ")" : "")));
    p.appendChild(el("span", {}, "; " + ep.T + " frames, boundaries at " + (ep.bounds.join(", ") || "none")));
    d.appendChild(p);
    d.appendChild(plot(ep));
    if (ep.images && ep.images.length) {
      var f = el("div", {"class": "frames"});
      ep.images.forEach(function (im) {
        var fig = el("figure"); fig.appendChild(el("img", {src: im.src, alt: "frame " + im.frame}));
        fig.appendChild(el("figcaption", {}, "frame " + im.frame)); f.appendChild(fig);
      });
      d.appendChild(f);
    }
    return d;
  }
  document.getElementById("review-heading").textContent = "Review first: confidence below " + thr;
  var intro = document.getElementById("review-intro"), said;
  if (!data.below) {
    said = "No episode has a confidence below " + thr + " (the lowest is " +
           (data.lowest === null ? "-" : fmt(data.lowest)) + ")" +
           (data.review.length ? "; listed for the reason given with each:" : ": nothing to review first.");
  } else {
    said = data.below + " of " + data.table.length + " episodes have a confidence below " + thr +
           (data.limit !== null && data.below > data.limit
            ? "; the " + data.limit + " least confident of them are here" : "") +
           (data.noted ? ", and episodes listed for the reason given with each" : "") + ", least confident first.";
  }
  intro.textContent = said + " Confidence: the expected share of an episode's frames labelled as the posterior " +
                      "has them.";
  var review = document.getElementById("review"), others = document.getElementById("others");
  data.episodes.forEach(function (ep) { (ep.review ? review : others).appendChild(card(ep)); });
  if (data.omitted) document.getElementById("omitted").textContent =
    data.omitted + " more episodes are only in the table below (the page draws at most " +
    data.episodes.length + ").";
  var body = document.querySelector("#table tbody");
  data.table.forEach(function (r) {
    var tr = el("tr");
    var a = el("a", {href: "#ep-" + r.key}, r.key);
    var td = el("td"); td.appendChild(a); tr.appendChild(td);
    tr.appendChild(el("td", {"class": r.confidence < thr ? "low" : ""}, fmt(r.confidence)));
    tr.appendChild(el("td", {}, String(r.T)));
    tr.appendChild(el("td", {}, r.path ? "alignment path" : "skips or revisits a step"));
    body.appendChild(tr);
  });
  document.body.setAttribute("data-rendered", String(data.episodes.length));
})();
</script>
</body>
</html>
"""
