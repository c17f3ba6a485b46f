"""Tests for the review page of `taco annotate --report` (taco_app/interop/review.py) and the
Dial's keypad in rollout pictures (taco_app/plots.py, taco_sim.dial DialTask.keypad).

(a) what the page holds, from a Recorder filled by hand: each sub-task's colour follows its
    name (Nav-World's colour words get their colour, other names a palette in the vocabulary's
    order), whatever its position in a sketch; the review list is the episodes below the
    threshold, least confident first; the agreement figure is in the data;
(b) the page in Debian's chromium (slow; skipped without chromium): the legend names every
    sub-task, a name has one colour in every chip, row label and label strip, each heat map
    has its row labels, time axis and colour scale, the boundary markers sit outside the heat
    map, the review list and the agreement are written out;
(c) the keypad drawn beside a Dial frame, and DialTask.keypad on a real press.
The end-to-end check that `taco annotate` puts its printed agreement on the page is in
tests/test_interop.py (it needs that file's trained model).
"""
import html.parser
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from taco_app.interop import review

NAV = ("black", "green", "yellow", "red")


def _posterior(positions, L, blur=0.0):
    """(T, L) posterior: one-hot labels, with blur of each frame's mass on the next position."""
    p = np.eye(L)[positions]                                                     # (T, L)
    if blur:
        nxt = np.eye(L)[np.minimum(positions + 1, L - 1)]
        p = (1 - blur) * p + blur * nxt
    return p


def _recorder(episodes):
    """episodes: [(key, sketch, segment lengths, confidence, monotone)]."""
    rec = review.Recorder()
    for key, sketch, lengths, confidence, monotone in episodes:
        positions = np.repeat(np.arange(len(sketch)), lengths)
        rec.add(key, "navworld: " + ", ".join(sketch), sketch, positions,
                _posterior(positions, len(sketch), 0.2), confidence, monotone)
    return rec


def _payload(path):
    text = path.read_text(encoding="utf-8")
    return json.loads(text.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0])


NAV_EPISODES = [("e0", ["green", "red"], [10, 20], 0.99, True),
                ("e1", ["red", "green"], [15, 15], 0.60, True),
                ("e2", ["black", "yellow", "red"], [8, 9, 13], 0.93, True),
                ("e3", ["yellow", "green", "black"], [5, 20, 5], 0.97, True),
                ("e4", ["red", "black"], [12, 18], 0.80, True)]


# ------------------------------------------------------------------------------------------
# (a) What the page holds
# ------------------------------------------------------------------------------------------

def test_a_subtask_keeps_its_colour_by_name_in_every_episode(tmp_path):
    """Chips were coloured by position: Nav-World's "green" was drawn orange and "red" blue, and
    a sub-task changed colour from one episode to the next. The page's colours are keyed by
    name: a colour word gets that colour; other names take the palette in the vocabulary's
    order, the same whatever the sketches' order."""
    page = tmp_path / "page.html"
    review.write_page(page, _recorder(NAV_EPISODES), [], {"dataset": "nav"}, vocab=NAV)
    colours = _payload(page)["colours"]
    assert list(colours) == list(NAV)                               # every sub-task, vocabulary order
    assert colours == {n: review.NAMED_COLOURS[n] for n in NAV}
    assert colours["green"] == "#2ca02c" and colours["red"] == "#d62728"

    names = ("reach", "grasp", "lift")
    first = review.subtask_colours(names)
    assert first == dict(zip(names, review.PALETTE[:3]))
    assert review.subtask_colours(["Lift", "reach"]) != review.subtask_colours(["reach", "Lift"])  # order = vocabulary
    mixed = review.subtask_colours(["reach", "Blue", "grasp"])      # a colour word's colour is not reused
    assert mixed["Blue"] == review.NAMED_COLOURS["blue"] and len(set(mixed.values())) == 3
    many = review.subtask_colours([f"s{i}" for i in range(len(review.PALETTE))])
    assert len(set(many.values())) == len(review.PALETTE)


def test_the_legend_names_only_the_sketches_subtasks_in_vocabulary_order(tmp_path):
    page = tmp_path / "page.html"
    review.write_page(page, _recorder(NAV_EPISODES[:2]), [], {}, vocab=("purple",) + NAV)
    assert list(_payload(page)["colours"]) == ["green", "red"]
    review.write_page(tmp_path / "no-vocab.html", _recorder(NAV_EPISODES), [], {})
    assert list(_payload(tmp_path / "no-vocab.html")["colours"]) == ["green", "red", "black", "yellow"]


def test_review_first_lists_the_least_confident_below_the_threshold(tmp_path):
    """The list held 20 episodes all at confidence >= 0.983: it now holds the episodes below the
    threshold, least confident first (at most limit of them), plus any with a note."""
    records = _recorder(NAV_EPISODES).episodes
    assert review.review_first(records, {}) == ["e1", "e4", "e2"]                  # 0.60, 0.80, 0.93
    assert review.review_first(records, {}, threshold=0.85) == ["e1", "e4"]
    assert review.review_first(records, {}, limit=2) == ["e1", "e4"]
    assert review.review_first(records, {"e0": "labels are not an alignment path"}, limit=1) == ["e1", "e0"]
    assert review.review_first(records, {}, threshold=0.5) == []
    page = tmp_path / "page.html"
    command_list = [{"episode": k, "confidence": records[k]["confidence"]} for k in ("e1", "e4", "e2", "e3", "e0")]
    review.write_page(page, _recorder(NAV_EPISODES), command_list, {}, threshold=0.95, limit=20)
    payload = _payload(page)
    listed = [e for e in payload["episodes"] if e["review"]]
    conf = [e["confidence"] for e in listed]
    assert [e["key"] for e in listed] == payload["review"] == ["e1", "e4", "e2"]
    assert conf == sorted(conf) and max(conf) < payload["threshold"] == 0.95
    assert payload["below"] == 3 and payload["lowest"] == 0.6
    review.write_page(tmp_path / "none.html", _recorder(NAV_EPISODES), command_list, {}, threshold=0.55)
    none = _payload(tmp_path / "none.html")
    assert none["review"] == [] and none["below"] == 0 and not any(e["review"] for e in none["episodes"])


def test_the_page_holds_the_agreement_and_the_segments(tmp_path):
    page = tmp_path / "page.html"
    review.write_page(page, _recorder(NAV_EPISODES), [], {}, agreement=(2667, 2678))
    payload = _payload(page)
    assert payload["agreement"] == {"share": pytest.approx(2667 / 2678), "frames": 2678}
    e2 = next(e for e in payload["episodes"] if e["key"] == "e2")
    assert e2["segs"] == [[0, 8, 0], [8, 17, 1], [17, 30, 2]] and e2["bounds"] == [8, 17]
    review.write_page(tmp_path / "none.html", _recorder(NAV_EPISODES), [], {}, agreement=(0, 0))
    assert _payload(tmp_path / "none.html")["agreement"] is None
    assert review.segments(np.array([0, 1, 0, 0])) == [[0, 1, 0], [1, 2, 1], [2, 4, 0]]


# ------------------------------------------------------------------------------------------
# (b) The page in a real browser
# ------------------------------------------------------------------------------------------

class _Elements(html.parser.HTMLParser):
    """Every start tag of a dumped DOM as (tag, attrs dict, text of the element's first data),
    each with the ids and classes of its ancestors."""

    VOID = {"meta", "img", "br", "input", "link", "hr"}

    def __init__(self):
        super().__init__()
        self.stack, self.found = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        inside = [a.get("id", "") + "." + a.get("class", "") for _, a in self.stack]
        entry = {"tag": tag, "attrs": attrs, "inside": inside, "text": ""}
        self.found.append(entry)
        if tag not in self.VOID:
            self.stack.append((tag, attrs))
            entry["open"] = True

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self.found and not self.found[-1]["text"]:
            self.found[-1]["text"] = data.strip()

    def having(self, cls=None, under=None):
        return [e for e in self.found
                if (cls is None or cls in e["attrs"].get("class", "").split())
                and (under is None or any(under in i for i in e["inside"]))]


def _background(style):
    m = re.search(r"background(?:-color)?:\s*(rgb\([^)]*\)|#[0-9a-f]+)", style or "")
    return m.group(1) if m else None


def _rgb(hex_colour):
    n = int(hex_colour[1:], 16)
    return f"rgb({n >> 16}, {(n >> 8) & 255}, {n & 255})"


def _dom(chromium, page, tmp_path):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}"]
    return subprocess.run([chromium, *flags, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120).stdout


@pytest.fixture
def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium; .ci/run does)")
    return found


@pytest.mark.slow
def test_the_page_in_a_browser_has_a_legend_axes_a_colour_scale_and_one_colour_per_name(chromium, tmp_path):
    page = tmp_path / "page.html"
    review.write_page(page, _recorder(NAV_EPISODES), [], {"dataset": "nav"}, vocab=NAV, agreement=(2667, 2678))
    dom = _dom(chromium, page, tmp_path)
    assert f'data-rendered="{len(NAV_EPISODES)}"' in dom, dom[-2000:]
    doc = _Elements()
    doc.feed(dom)

    legend = [e["attrs"]["data-subtask"] for e in doc.having("chip", under="legend-subtasks")]
    assert legend == list(NAV)
    seen = {}                                                       # name -> colours drawn for it
    for e in doc.found:
        name = e["attrs"].get("data-subtask")
        colour = _background(e["attrs"].get("style"))
        if e["tag"] == "span" and "swatch" in e["attrs"].get("class", ""):
            continue
        if name is not None and colour is not None:
            seen.setdefault(name, set()).add(colour)
    assert seen == {n: {_rgb(review.NAMED_COLOURS[n])} for n in NAV}

    canvases = doc.having("heat")
    assert len(canvases) == len(NAV_EPISODES)
    for key, sketch, lengths, _, _ in NAV_EPISODES:
        card = f"ep-{key}."
        rows = doc.having("rowlabel", under=card)
        assert [r["attrs"].get("data-subtask") for r in rows if "data-subtask" in r["attrs"]] == sketch
        axis = doc.having("axis", under=card)
        assert len(axis) == 1 and axis[0]["attrs"]["data-frames"] == str(sum(lengths))
        ticks = [t["text"] for t in doc.having("tick", under=card)]
        assert ticks[0] == "0" and len(ticks) >= 3 and all(t.isdigit() for t in ticks)
        scale = doc.having("scale", under=card)
        assert len(scale) == 1 and scale[0]["attrs"]["data-range"] == "0-1"
        marks = [m["attrs"]["data-frame"] for m in doc.having("bmark", under=card)]
        assert marks == [str(b) for b in np.cumsum(lengths)[:-1]]
        # the markers live in their own track above the heat map, not in the canvas's cell
        assert all(any(".marks" in i for i in m["inside"]) for m in doc.having("bmark", under=card))
    assert "99.59 %" in dom and "of 2678 frames" in dom
    review_part = dom.split('id="review"', 1)[1].split('id="others"', 1)[0]
    assert re.findall(r'id="ep-(e\d)"', review_part) == ["e1", "e4", "e2"]
    assert "Review first: confidence below 0.95" in dom and "3 of 5 episodes have a confidence below 0.95" in dom


@pytest.mark.slow
def test_a_page_with_nothing_below_the_threshold_says_so(chromium, tmp_path):
    page = tmp_path / "page.html"
    review.write_page(page, _recorder(NAV_EPISODES), [], {}, threshold=0.5)
    dom = _dom(chromium, page, tmp_path)
    assert "No episode has a confidence below 0.5 (the lowest is 0.6000): nothing to review first." in dom
    assert "Agreement not measured" in dom
    review_part = dom.split('id="review"', 1)[1].split('id="others"', 1)[0]
    assert "card" not in review_part


# ------------------------------------------------------------------------------------------
# (c) The Dial's keypad beside each rollout frame
# ------------------------------------------------------------------------------------------

def test_the_keypad_picture_marks_the_new_press_the_old_ones_and_the_target():
    """At the Dial's 112-pixel render a key is a few pixels: the contact sheet draws the pad
    beside each frame, the key pressed since the previous frame shown in PAD_COLOURS["now"]."""
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex
    from taco_app import plots
    labels = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "0", "#"]
    pad = {"cols": 3, "labels": labels, "down": [False] * 12, "target": 0,
           "presses": [(38, 10, True), (97, 4, True), (99, 8, False)]}
    fig, ax = plt.subplots()
    plots.draw_keypad(ax, pad, since=90)
    faces = {t.get_text(): to_hex(p.get_facecolor()) for p, t in zip(ax.patches, ax.texts)}
    edges = {t.get_text(): to_hex(p.get_edgecolor()) for p, t in zip(ax.patches, ax.texts)}
    plt.close(fig)
    assert faces["5"] == plots.PAD_COLOURS["now"] and faces["9"] == plots.PAD_COLOURS["now"]
    assert faces["0"] == plots.PAD_COLOURS["counted"] and faces["2"] == plots.PAD_COLOURS["key"]
    assert faces["*"] == plots.PAD_COLOURS["other"]
    assert edges["1"] == plots.PAD_COLOURS["target"] and edges["2"] != plots.PAD_COLOURS["target"]
    fig, ax = plt.subplots()
    plots.draw_keypad(ax, pad, since=98)                            # 5 pressed before, 9 did not count
    faces = {t.get_text(): to_hex(p.get_facecolor()) for p, t in zip(ax.patches, ax.texts)}
    plt.close(fig)
    assert faces["5"] == plots.PAD_COLOURS["counted"] and faces["9"] == plots.PAD_COLOURS["now"]


def test_the_dial_reports_its_keypad_after_a_real_press():
    from taco_sim.dial.env import SLOT_LABELS, STANDARD_LAYOUT
    from taco_sim.dial.expert import DialTask, expert_torque_from_obs
    task = DialTask()
    task.reset([5], seed=0)
    pad = task.keypad()
    assert pad["labels"] == list(SLOT_LABELS) and pad["target"] == STANDARD_LAYOUT[5] and pad["presses"] == []
    while not task.done and task.t < 100:
        task.step(expert_torque_from_obs(task.env.obs, task.target))
    pad = task.keypad()
    assert task.done and pad["target"] is None
    assert [(slot, counted) for _, slot, counted in pad["presses"]] == [(STANDARD_LAYOUT[5], True)]
    assert pad["labels"][pad["presses"][0][1]] == "5"
