"""The review page of `taco annotate --report OUT.html`: one self-contained HTML file (no server,
no network: the data sit in the page as JSON, drawn by its own script) to check an annotation.

What it shows, the episodes to review first at the top (the least confident and those whose
labels are not an alignment path, as the command's review list):

- per episode: its key, task string and sketch; the posterior over sketch positions against
  time (a heat map: one row per sketch position, darker = more probable), the labels the
  decoder chose (a strip of one colour per sub-task) and the boundaries between them; the
  confidence (the expected share of frames labelled as the posterior has them); and, where the
  dataset has camera images that can be read without a video decoder, the frames at each
  boundary and at both ends;
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

from taco_ref import files

MAX_COLUMNS = 240
"""Time columns of a posterior kept in the page."""
MAX_DETAILED = 200
"""Episodes drawn in detail."""
MAX_IMAGES = 6
"""Frames shown per episode (the boundaries first, then the ends)."""


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
            "labels": [int(p) for p in np.asarray(positions)[np.linspace(0, len(positions) - 1, cols.shape[0])
                                                                .round().astype(int)]],
            "bounds": boundaries(positions), "confidence": round(float(confidence), 6),
            "path": bool(monotone)}


def frames_to_show(record):
    """The frames of an episode whose images the page shows, in time order: each boundary, then
    the first and the last frame, at most MAX_IMAGES."""
    picked = list(dict.fromkeys(record["bounds"] + [0, record["T"] - 1]))
    return sorted(picked[:MAX_IMAGES])


def write_page(path, recorder, review, meta, images=None):
    """Write the page to path (atomically). review: the command's review list (dicts with
    "episode"); meta: {label: value} for the header; images(key, frames) -> [(frame, data URI)]
    or None where the dataset has no readable camera images."""
    order = [str(r["episode"]) for r in review]
    by_key = {str(k): rec for k, rec in recorder.episodes.items()}
    original = {str(k): k for k in recorder.episodes}                   # the dataset's own key
    detailed = [k for k in order if k in by_key]
    detailed += [k for k in by_key if k not in set(detailed)]
    detailed = detailed[:MAX_DETAILED]
    shown = []
    for k in detailed:
        rec = dict(by_key[k])
        rec["review"] = k in order
        rec["note"] = next((r.get("note", "") for r in review if str(r["episode"]) == k), "")
        if images is not None:
            rec["images"] = [{"frame": int(t), "src": src} for t, src in images(original[k], frames_to_show(rec))]
        shown.append(rec)
    table = sorted(({"key": k, "confidence": r["confidence"], "T": r["T"], "path": r["path"]}
                    for k, r in by_key.items()), key=lambda r: (r["confidence"], r["key"]))
    payload = {"meta": {str(k): str(v) for k, v in meta.items()}, "episodes": shown, "table": table,
               "review": order, "omitted": len(by_key) - len(detailed)}
    # every <, > and & as a JSON escape: "</" alone is not enough, "<!--<script>" in a task string
    # switches the HTML parser into the script's escaped state and swallows the page's own code
    data = (json.dumps(payload, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    title = html.escape(str(meta.get("dataset", "annotation")))
    files.write_bytes(path, PAGE.replace("%%TITLE%%", title).replace("%%DATA%%", data).encode("utf-8"))
    return {"out": os.fspath(path), "detailed": len(shown), "episodes": len(by_key)}


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
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em .8em; margin: .8em 0; }
.card.flag { border-color: #d9822b; background: #fffaf3; }
.card h3 { font-size: 1em; margin: 0 0 .3em; }
.chip { display: inline-block; padding: 0 .5em; margin: 0 .25em .25em 0; border-radius: 3px; color: #fff; }
canvas { display: block; width: 100%; image-rendering: pixelated; border: 1px solid #eee; }
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
<h2 id="review-heading">Review first</h2>
<p id="review-intro">The least confident episodes, and those whose labels skip or revisit a sketch step.
Heat map: the posterior over sketch positions (one row each, top = first) against time; strip below:
the labels; lines: boundaries.</p>
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
  var palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  var meta = document.getElementById("meta");
  Object.keys(data.meta).forEach(function (k) {
    meta.appendChild(el("dt", {}, k)); meta.appendChild(el("dd", {}, data.meta[k]));
  });
  function decode(b64) {
    var s = atob(b64), out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  function draw(ep) {
    var L = ep.sketch.length, C = ep.C, rowH = 14, stripH = 10;
    var c = el("canvas", {width: C, height: L * rowH + stripH + 2, "data-episode": ep.key});
    c.style.height = (L * rowH + stripH + 2) + "px";          // stretched along time only
    var g = c.getContext("2d"), post = decode(ep.post);
    for (var t = 0; t < C; t++) {
      for (var l = 0; l < L; l++) {
        var v = post[t * L + l] / 255;
        g.fillStyle = "rgba(20,40,120," + v.toFixed(3) + ")";
        g.fillRect(t, l * rowH, 1, rowH);
      }
      g.fillStyle = palette[ep.labels[t] % palette.length];
      g.fillRect(t, L * rowH + 2, 1, stripH);
    }
    g.fillStyle = "#d62728";
    ep.bounds.forEach(function (b) { g.fillRect(Math.floor(b * C / ep.T), 0, 1, L * rowH + stripH + 2); });
    return c;
  }
  function card(ep) {
    var d = el("div", {"class": "card" + (ep.review ? " flag" : ""), id: "ep-" + ep.key});
    d.appendChild(el("h3", {}, "episode " + ep.key + (ep.task ? ": " + ep.task : "")));
    var p = el("p");
    ep.sketch.forEach(function (s, i) {
      var chip = el("span", {"class": "chip"}, s); chip.style.background = palette[i % palette.length];
      p.appendChild(chip);
    });
    var conf = el("span", {"class": ep.confidence < 0.9 ? "low" : ""},
                  " confidence " + ep.confidence.toFixed(4) + (ep.note ? " (" + ep.note + ")" : ""));
    p.appendChild(conf);
    p.appendChild(el("span", {}, "; " + ep.T + " frames, boundaries at " + (ep.bounds.join(", ") || "none")));
    d.appendChild(p);
    d.appendChild(draw(ep));
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
  var review = document.getElementById("review"), others = document.getElementById("others");
  data.episodes.forEach(function (ep) { (ep.review ? review : others).appendChild(card(ep)); });
  if (!data.review.length) review.appendChild(el("p", {}, "Nothing to review."));
  if (data.omitted) document.getElementById("omitted").textContent =
    data.omitted + " more episodes are only in the table below (the page draws at most " +
    data.episodes.length + ").";
  var body = document.querySelector("#table tbody");
  data.table.forEach(function (r) {
    var tr = el("tr");
    var a = el("a", {href: "#ep-" + r.key}, r.key);
    var td = el("td"); td.appendChild(a); tr.appendChild(td);
    tr.appendChild(el("td", {"class": r.confidence < 0.9 ? "low" : ""}, r.confidence.toFixed(4)));
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
