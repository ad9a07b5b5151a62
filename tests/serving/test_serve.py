"""``seq2seq-serve``: answers equal the offline ``Translator``'s (options as in
``seq2seq-translate``), concurrent requests are merged yet each gets its own answer,
``/attention`` returns exactly the weights ``--plot-attention`` draws, bad requests get a
4xx and leave the server up, and the load test checks what it reports."""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from helpers import save_tiny_checkpoint  # noqa: E402

from scripts.bench.load import check_loopback, decoding_of, run_loadtest  # noqa: E402
from seq2seq.cli.serve import build_parser, config_from_args  # noqa: E402
from seq2seq.cli.serve import main as serve_main  # noqa: E402
from seq2seq.cli.translate import build_parser as translate_parser  # noqa: E402
from seq2seq.cli.translate import decoding_from_args  # noqa: E402
from seq2seq.config import ServeConfig  # noqa: E402
from seq2seq.plotting import _panels  # noqa: E402  (the weights plot_attention draws)
from seq2seq.serving import MicroBatcher, create_app, load_models, running  # noqa: E402
from seq2seq.serving.api import DecodingOptions, decoding_for  # noqa: E402
from seq2seq.translation.translator import Translator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
TEST_DE = ROOT / "data" / "multi30k" / "test_2016_flickr.de.gz"
SENTENCES = [
    "Ein Hund rennt durch den Schnee.",
    "Zwei Männer spielen Fußball auf einer Wiese.",
    "Eine Frau mit rotem Hut liest ein Buch.",
    "Kinder.",
    "Ein Mann fährt mit dem Fahrrad eine Straße entlang, während es regnet.",
    "Drei Personen sitzen auf einer Bank im Park.",
    "Ein kleines Mädchen lacht.",
    "Ein Koch schneidet Gemüse in einer Küche.",
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> list[str]:
    """The shipped De->En model (default) and a tiny random one with its tokenizers."""
    tokenizers = Translator.from_checkpoint(SHIPPED).tokenizers
    tiny = save_tiny_checkpoint(tmp_path_factory.mktemp("serve") / "tiny.ckpt", tokenizers)
    return [str(SHIPPED), f"tiny={tiny}"]


@pytest.fixture(scope="module")
def models(checkpoints):
    return load_models(checkpoints)


@pytest.fixture(scope="module")
def client(models):
    with TestClient(create_app(models)) as c:
        yield c


def offline(models, flags: list[str], texts: list[str], model: str = "multi30k_de_en_tiny"):
    """What ``seq2seq-translate -c CKPT FLAGS`` computes for ``texts``."""
    decoding = decoding_from_args(translate_parser().parse_args(["-m", "x", *flags]))
    base = models[model].translator
    return Translator(base.model, base.tokenizers, decoding).translate_full(texts)


# ---------------------------------------------------------------- /translate
OPTIONS = [  # (JSON options, the same as seq2seq-translate flags)
    ({}, []),
    ({"beam": 5, "nbest": 3}, ["--beam", "5", "--nbest", "3"]),
    ({"beam": 1, "length_penalty": "gnmt", "lenpen": 1.0}, ["--beam", "1", "--length-penalty", "gnmt", "--lenpen", "1.0"]),
    ({"beam": 4, "stopping": "patience", "min_len": 4, "max_len_b": 6}, ["--beam", "4", "--stopping", "patience", "--min-len", "4", "--max-len-b", "6"]),
    ({"sample": True, "seed": 7, "nbest": 2, "topk": 20}, ["--sample", "--seed", "7", "--nbest", "2", "--topk", "20"]),
]


@pytest.mark.parametrize(("options", "flags"), OPTIONS)
def test_translate_equals_offline_translator(client, models, options, flags):
    texts = [*SENTENCES[:4], "", "  "]
    answer = client.post("/translate", json={"texts": texts, **options})
    assert answer.status_code == 200, answer.text
    want = offline(models, flags, texts)
    got = answer.json()["results"]
    assert [r["hyp"] for r in got] == [w.hyp for w in want]
    assert [r["src"] for r in got] == texts
    for r, w in zip(got, want):
        assert r["score"] == pytest.approx(w.score, abs=1e-6)
        assert [(n["hyp"], pytest.approx(n["score"], abs=1e-6)) for n in r["nbest"]] == w.nbest


def test_models_are_chosen_by_name(client, models):
    listed = client.get("/models").json()
    assert [m["name"] for m in listed] == list(models) == ["multi30k_de_en_tiny", "tiny"]
    assert (listed[0]["src_lang"], listed[0]["tgt_lang"]) == ("de", "en")
    # the shipped model is calibrated (seq2seq-calibrate), the tiny one is not
    assert listed[0]["unsure_below"] == models["multi30k_de_en_tiny"].translator.unsure_below > 0
    assert listed[1]["unsure_below"] is None
    texts = SENTENCES[:3]
    tiny = client.post("/translate", json={"texts": texts, "model": "tiny"}).json()
    assert tiny["model"] == "tiny"
    assert [r["hyp"] for r in tiny["results"]] == [w.hyp for w in offline(models, [], texts, "tiny")]
    default = client.post("/translate", json={"texts": texts}).json()
    assert default["model"] == "multi30k_de_en_tiny"
    assert [r["hyp"] for r in default["results"]] != [r["hyp"] for r in tiny["results"]]


def documented_translate_example() -> tuple[dict, dict]:
    """docs/serving.md's ``curl .../translate -d '...'`` request and the JSON block after it."""
    page = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    curl = re.search(r"curl -s \S+/translate .*?-d '(\{.*?\})'", page, re.S)
    assert curl, "docs/serving.md: no /translate request with a -d body"
    answer = re.search(r"```json\n(.*?)\n```", page[curl.end():], re.S)
    assert answer, "docs/serving.md: no ```json answer after the /translate request"
    return json.loads(curl[1]), json.loads(answer[1])


def assert_same_answer(documented, real, where: str = "") -> None:
    """Every documented field, in the same shape; numbers to the documented digits."""
    if isinstance(documented, dict):
        assert set(documented) == set(real), (where, sorted(set(documented) ^ set(real)))
        for key in documented:
            assert_same_answer(documented[key], real[key], f"{where}.{key}")
    elif isinstance(documented, list):
        assert len(documented) == len(real), where
        for i, (a, b) in enumerate(zip(documented, real)):
            assert_same_answer(a, b, f"{where}[{i}]")
    elif isinstance(documented, float):
        assert real == pytest.approx(documented, abs=6e-4), (where, real)
    else:
        assert documented == real, (where, real)


def test_documented_translate_answer_is_the_shipped_models(client):
    """The request docs/serving.md shows, posted to the app serving the shipped De->En model
    first (as ``seq2seq-serve -m data/models/multi30k_de_en_tiny.ckpt``), answers what the
    page says: every field, scores to the digits shown; and the page says what each is."""
    request, documented = documented_translate_example()
    answer = client.post("/translate", json=request)
    assert answer.status_code == 200, answer.text
    assert_same_answer(documented, answer.json())
    result = answer.json()["results"][0]
    assert math.isclose(result["confidence"], math.exp(result["score"]), rel_tol=1e-9)  # average
    page = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    for field in ("score", "log_prob", "confidence"):
        assert f"- `{field}`:" in page, f"docs/serving.md does not say what {field} is"


# ---------------------------------------------------------------- micro-batching
def test_concurrent_requests_are_merged_and_each_gets_its_own_answer(models):
    """Eight requests at once, two decoding settings: fewer model calls than requests, and
    every answer is the offline translation of its own texts with its own options."""
    bodies = [{"texts": [s], **({"beam": 5} if i % 2 else {})} for i, s in enumerate(SENTENCES)]
    bodies[2]["texts"].append(SENTENCES[0])  # a request of two texts among them
    answers: list = [None] * len(bodies)
    app = create_app(models, ServeConfig(window_ms=300))  # wide window: arrivals overlap surely
    with running(app) as url, httpx.Client(base_url=url, timeout=120) as http:
        start = threading.Barrier(len(bodies))

        def send(i: int) -> None:
            start.wait()
            answers[i] = http.post("/translate", json=bodies[i]).json()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        health = http.get("/health").json()
    for body, answer in zip(bodies, answers):
        flags = ["--beam", "5"] if "beam" in body else []
        assert [r["hyp"] for r in answer["results"]] == [w.hyp for w in offline(models, flags, body["texts"])]
    assert health["requests"] == len(bodies)
    assert 2 <= health["model_calls"] < len(bodies)  # two settings never share a call


def test_batcher_takes_turns_within_the_cost_budget():
    """Round-robin: a call starts with the next piece of the request whose turn it is, is
    filled with pieces of others of the same key up to the budget, and those go to the back:
    the small request waits for one bounded piece of the big one, not for all of it."""
    batcher = MicroBatcher(window_s=0.0, max_cost=10)
    jobs = {"big": _job("a", [4] * 6), "small": _job("a", [3]), "other": _job("b", [9, 2]),
            "dear": _job("a", [11])}
    name = {id(job): n for n, job in jobs.items()}
    batcher._active.extend(jobs.values())
    calls = []
    while batcher._active:
        pieces = batcher.next_call()
        calls.append([(name[id(j)], start, end) for j, start, end in pieces])
        assert sum(c for j, start, end in pieces for c in j.costs[start:end]) <= 10 or len(pieces) == 1
        for job, _, end in pieces:
            job.done = end
            if end == len(job.texts):
                batcher._active.remove(job)
    assert calls == [
        [("big", 0, 2)],  # 8: small's 3 would pass 10
        [("small", 0, 1), ("big", 2, 3)],  # small's turn, filled with big's next piece
        [("other", 0, 1)],  # key b never shares a call with key a
        [("dear", 0, 1)],  # dearer than the budget: alone
        [("big", 3, 5)],
        [("other", 1, 2)],
        [("big", 5, 6)],
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.lists(st.integers(1, 15), min_size=1, max_size=8)),
                min_size=1, max_size=6))
def test_batcher_schedules_every_text_once_in_order_and_in_turn(jobs_spec):
    """Any mix of requests: each text runs exactly once, a request's texts in order, a call
    holds one key within the budget (or one dear text), and no request waits for more calls
    than there are requests ahead of it before each of its pieces."""
    batcher = MicroBatcher(window_s=0.0, max_cost=10)
    jobs = [_job(key, costs) for key, costs in jobs_spec]
    batcher._active.extend(jobs)
    ran = {id(j): [] for j in jobs}
    waited = {id(j): 0 for j in jobs}
    while batcher._active:
        pieces = batcher.next_call()
        assert len({j.key for j, _, _ in pieces}) == 1
        cost = sum(c for j, start, end in pieces for c in j.costs[start:end])
        assert cost <= 10 or (len(pieces) == 1 and pieces[0][2] - pieces[0][1] == 1)
        for job in batcher._active:
            waited[id(job)] = 0 if any(j is job for j, _, _ in pieces) else waited[id(job)] + 1
            assert waited[id(job)] < len(jobs)
        for job, start, end in pieces:
            ran[id(job)].extend(range(start, end))
            job.done = end
            if end == len(job.texts):
                batcher._active.remove(job)
    assert all(ran[id(j)] == list(range(len(j.texts))) for j in jobs)


def _job(key, costs):
    from concurrent.futures import Future  # only .done() is asked: no event loop needed

    from seq2seq.serving.batcher import _Job

    return _Job(key, ["x"] * len(costs), costs, lambda texts: texts, Future())


def test_the_model_runs_off_the_event_loop():
    """The work blocks until the event loop itself releases it: only possible if the loop
    keeps running during the call."""
    release = threading.Event()

    def work(texts):
        if not release.wait(10):
            raise TimeoutError("the event loop was blocked by the model call")
        return texts

    async def scenario():
        batcher = MicroBatcher(window_s=0.0, max_cost=10)
        await batcher.start()
        try:
            pending = asyncio.ensure_future(batcher.submit("k", ["x"], [1], work))
            await asyncio.sleep(0.05)
            assert not pending.done()
            release.set()
            return await asyncio.wait_for(pending, 10)
        finally:
            await batcher.stop()

    assert asyncio.run(scenario()) == ["x"]


def test_requests_arriving_during_a_call_share_the_next_one():
    """With no window (the server's default) a request to an idle batcher starts at once,
    and requests that arrive while its call runs are merged into the next call."""
    assert ServeConfig().window_ms == 0
    started, release, calls = threading.Event(), threading.Event(), []

    def work(texts):
        calls.append(list(texts))
        started.set()
        if not release.wait(10):
            raise TimeoutError("never released")
        return texts

    async def scenario():
        batcher = MicroBatcher(window_s=0.0, max_cost=100)
        await batcher.start()
        try:
            first = asyncio.ensure_future(batcher.submit("k", ["a"], [1], work))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
            later = [asyncio.ensure_future(batcher.submit("k", [t], [1], work)) for t in "bcd"]
            await asyncio.sleep(0.05)
            release.set()
            return await asyncio.wait_for(asyncio.gather(first, *later), 10)
        finally:
            await batcher.stop()

    assert asyncio.run(scenario()) == [["a"], ["b"], ["c"], ["d"]]
    assert calls == [["a"], ["b", "c", "d"]]


def test_a_failing_request_fails_alone():
    """One request whose work raises in a merged call: the others still get their results."""

    def work(texts):
        if "boom" in texts:
            raise RuntimeError("boom")
        return [t.upper() for t in texts]

    async def scenario():
        batcher = MicroBatcher(window_s=0.05, max_cost=100)
        await batcher.start()
        try:
            texts = [["a", "b"], ["boom"], ["c"]]
            outs = await asyncio.gather(*(batcher.submit("k", t, [1] * len(t), work) for t in texts),
                                        return_exceptions=True)
            return outs, batcher.model_calls
        finally:
            await batcher.stop()

    outs, calls = asyncio.run(scenario())
    assert outs[0] == ["A", "B"] and outs[2] == ["C"]
    assert isinstance(outs[1], RuntimeError)
    assert calls == 1 + 3  # the merged call, then one per request


# ---------------------------------------------------------------- /attention
@pytest.mark.parametrize("options", [{}, {"beam": 5}])
def test_attention_is_exactly_what_plot_attention_draws(client, models, options):
    text = SENTENCES[1]
    answer = client.post("/attention", json={"text": text, **options})
    assert answer.status_code == 200, answer.text
    got = answer.json()
    flags = ["--beam", "5"] if options else []
    decoding = decoding_from_args(translate_parser().parse_args(["-m", "x", *flags]))
    base = models["multi30k_de_en_tiny"].translator
    want = Translator(base.model, base.tokenizers, decoding).translate_full([text], need_attention=True)[0]
    assert (got["hyp"], got["src_pieces"], got["tgt_pieces"]) == (want.hyp, want.src_pieces, want.tgt_pieces)
    names = {"encoder self": "encoder_self", "decoder self": "decoder_self", "cross": "cross"}
    rows_cols = {"encoder_self": ("src_pieces", "src_pieces"),
                 "decoder_self": ("tgt_pieces", "tgt_in_pieces"), "cross": ("tgt_pieces", "src_pieces")}
    panels = list(_panels(want.src_pieces, want.tgt_pieces, want.attention))
    assert len(panels) == sum(len(layers) for layers in got["attention"].values())
    for title, weights, rows, cols in panels:
        kind, layer = names[title.rsplit(" L", 1)[0]], int(title.rsplit(" L", 1)[1])
        assert got["attention"][kind][layer] == weights.tolist()  # bit for bit
        assert (got[rows_cols[kind][0]], got[rows_cols[kind][1]]) == (list(rows), list(cols))


def test_attention_rows_are_distributions_and_decoder_self_is_causal(client):
    got = client.post("/attention", json={"text": SENTENCES[0]}).json()
    for kind, layers in got["attention"].items():
        for heads in layers:
            for matrix in heads:
                for i, row in enumerate(matrix):
                    assert math.fsum(row) == pytest.approx(1.0, abs=1e-5), kind
                    if kind == "decoder_self":
                        assert all(w == 0.0 for w in row[i + 1:])


# ---------------------------------------------------------------- limits
BAD = [  # (endpoint, body (dict or raw bytes), status, words the detail must contain)
    ("/translate", {"texts": ["x"], "model": "nope"}, 404, "unknown model 'nope'"),
    ("/translate", {"texts": ["x"], "model": "/etc/passwd"}, 404, "unknown model"),
    ("/translate", {"texts": ["x"], "checkpoint": "/tmp/a.ckpt"}, 422, "checkpoint: Extra inputs"),
    ("/translate", {"texts": ["x"] * 65}, 413, "at most 64 per request"),
    ("/translate", {"texts": ["x" * 1001]}, 413, "at most 1000"),
    ("/translate", {"texts": [" ".join(["Hund"] * 80)], "model": "tiny"}, 413, "takes at most 63"),
    ("/translate", {"texts": "x"}, 422, "texts: Input should be a valid list"),
    ("/translate", {"texts": ["x"], "beam": 0}, 422, "beam size must be >= 1"),
    ("/translate", {"texts": ["x"], "beam": 17}, 422, "at most 16"),
    ("/translate", {"texts": ["x"], "beam": 3, "nbest": 4}, 422, "nbest=4 cannot exceed beam_size=3"),
    ("/translate", {"texts": ["x"], "nbest": 2}, 422, "nbest N > 1 needs beam K >= N or sample"),
    ("/translate", {"texts": ["x"], "length_penalty": "long"}, 422, "'long' is not one of"),
    ("/translate", {"texts": ["x"], "topp": 1.5}, 422, "top_p must be in (0, 1]"),
    ("/translate", {"texts": ["x"], "seed": -1}, 422, "seed:"),
    ("/translate", {"texts": ["x"], "max_len_b": 10**9}, 422, "max_len_b:"),
    ("/translate", b'{"texts": ["x"], "sample": true, "temperature": NaN}', 422, "temperature:"),
    ("/translate", b'{"texts": ["x"', 422, "JSON decode error"),
    ("/translate", b'{"texts": ["' + b"x" * 1_100_000 + b'"]}', 413, "request body over"),
    ("/attention", {"text": "   "}, 422, "nothing to translate"),
    ("/attention", {"text": "x", "beam": "wide"}, 422, "beam:"),
    ("/translate", {"texts": ["x"], "beam": True}, 422, "beam: Input should be a valid integer"),
    ("/translate", {"texts": ["x"], "lenpen": True}, 422, "lenpen: Value error, expected a number"),
    ("/translate", {"texts": ["x"], "sample": 1}, 422, "sample: Input should be a valid boolean"),
    ("/translate", b'{"texts": ["ok", "\\ud800"]}', 422, "text 1 contains a lone UTF-16 surrogate"),
    ("/attention", b'{"text": "a\\udfffb"}', 422, "lone UTF-16 surrogate"),
]


@pytest.mark.parametrize(("path", "body", "status", "words"), BAD, ids=[b[3] for b in BAD])
def test_bad_requests_get_a_one_line_4xx_and_the_server_stays_up(client, path, body, status, words):
    if isinstance(body, bytes):
        answer = client.post(path, content=body, headers={"content-type": "application/json"})
    else:
        answer = client.post(path, json=body)
    assert answer.status_code == status, answer.text
    detail = answer.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and words in detail
    assert "--" not in detail  # the API's words, not the command line's
    assert client.get("/health").json()["status"] == "ok"
    assert client.post("/translate", json={"texts": ["Ein Hund."]}).json()["results"][0]["hyp"]


def test_explorer_is_served_without_external_assets(client):
    page = client.get("/")
    assert page.status_code == 200 and "explorer.js" in page.text
    for asset in ("explorer.js", "explorer.css"):
        body = client.get(f"/static/{asset}")
        assert body.status_code == 200
        assert "http://" not in body.text and "https://" not in body.text  # works offline
    assert "http" not in page.text.replace('lang="en"', "")


# ---------------------------------------------------------------- the command
def test_listens_on_loopback_unless_told_otherwise():
    import ipaddress

    cfg = config_from_args(build_parser().parse_args(["-m", "x.ckpt"]))
    assert ipaddress.ip_address(cfg.host).is_loopback
    assert cfg == ServeConfig()  # every default comes from ServeConfig


def test_several_models_one_flag_each(capsys):
    """``-m`` like the other commands (``-c`` still works, with the deprecation notice)."""
    assert build_parser().parse_args(["-m", "a.ckpt", "-m", "b=c.ckpt"]).checkpoint == ["a.ckpt", "b=c.ckpt"]
    assert build_parser().parse_args(["-c", "a.ckpt", "-c", "b.ckpt"]).checkpoint == ["a.ckpt", "b.ckpt"]
    assert "-c is deprecated" in capsys.readouterr().err


def _busy_port() -> tuple[socket.socket, int]:
    sock = socket.create_server(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def test_bad_command_lines_are_one_line_errors(tmp_path, capsys):
    busy, port = _busy_port()
    cases = [  # (argv, words in the message)
        (["-m", str(tmp_path / "missing.ckpt"), "--port", "0"], "missing.ckpt: no such file"),
        (["-m", str(SHIPPED), "--port", "70000"], "--port must be in [0, 65535]"),
        (["-m", str(SHIPPED), "--window-ms", "-1"], "--window-ms must be in [0, 1000.0]"),
        (["-m", str(SHIPPED), "--window-ms", "inf"], "--window-ms must be in [0, 1000.0]"),
        (["-m", str(SHIPPED), "--window-ms", "nan"], "--window-ms must be in [0, 1000.0]"),
        (["-m", str(SHIPPED), "--max-beam", "5000"], "--max-beam must be <= 1000"),
        (["-m", str(SHIPPED), "--window-ms", "soon"], "--window-ms: invalid float value"),
        (["-m", str(SHIPPED), "--port", str(port)], f"cannot listen on 127.0.0.1:{port}"),
        (["-m", f"m={SHIPPED}", "-m", f"m={SHIPPED}", "--port", "0"], "a model named 'm' was given twice"),
        (["-m", f"a b={SHIPPED}", "--port", "0"], "model name 'a b' must be"),
        (["-m", str(SHIPPED), "--request-timeout-s", "nan"], "--request-timeout-s must be a finite"),
        (["-m", str(SHIPPED), "--max-connections", "0"], "--max-connections must be > 0"),
        (["-m", str(SHIPPED), "--compile", "yes"], "--compile: invalid choice: 'yes'"),
        (["-m", str(SHIPPED), "--port", "0", "--api-keys", str(tmp_path / "keys.txt")],
         "--api-keys " + str(tmp_path / "keys.txt") + ": cannot read it"),
    ]
    with busy:
        for argv, words in cases:
            with pytest.raises(SystemExit) as exit_:
                serve_main(argv)
            err = capsys.readouterr().err.strip()
            assert exit_.value.code == 2, argv
            assert err.startswith("seq2seq-serve: error: ") and "\n" not in err and words in err, err


# ---------------------------------------------------------------- the load test
@pytest.mark.slow
def test_load_test_reports_every_answer_correct(tmp_path):
    """A tiny run against a real ``seq2seq-serve`` child process."""
    report = run_loadtest(SHIPPED, TEST_DE, clients=3, requests=2, texts_per_request=2,
                          options={"beam": 2}, time_limit_s=120, window_ms=50, compile="off")
    assert (report.answered, report.errors, report.wrong) == (6, 0, 0), report.first_problems
    assert len(report.latencies_ms) == 6 and report.offline_sent_per_s > 0
    assert 1 <= report.model_calls <= 6
    summary = report.summary()
    assert summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"] <= summary["max_ms"]
    json.dumps(summary)  # the --json output is plain JSON


@pytest.mark.slow
def test_mixed_load_test_checks_both_apis_and_reports_memory():
    """Half the requests through LibreTranslate's API (default decoding), half through ours
    (beam 2): every answer is checked against its own offline translation."""
    report = run_loadtest(SHIPPED, TEST_DE, clients=2, requests=3, texts_per_request=2,
                          options={"beam": 2}, time_limit_s=120, libre_share=0.5,
                          compile="off")
    assert (report.answered, report.errors, report.wrong) == (6, 0, 0), report.first_problems
    assert report.libre_requests == 3
    assert 0 < report.rss_before_mb <= report.rss_peak_mb and report.rss_after_mb > 0
    assert any("LibreTranslate requests: 3 of 6" in line for line in report.lines())


@pytest.mark.parametrize("options", [{}, {"beam": 2}, {"beam": 1}, {"beam": 4, "nbest": 2},
                                     {"sample": True, "topk": 5, "seed": 3},
                                     {"lenpen": 1.0, "length_penalty": "gnmt", "max_len_b": 7},
                                     {"no_repeat_ngram_size": 0, "stopping": "exact"}])
def test_load_test_checks_answers_against_the_servers_own_decoding(options):
    """The load test's offline reference decodes as the server does for the same request
    options, though it reaches the server only through its HTTP API."""
    assert decoding_of(options) == decoding_for(DecodingOptions(**options), ServeConfig())


def test_load_test_refuses_options_the_server_would():
    for options, words in [({"beams": 2}, "option 'beams'"), ({"beam": 0}, "^beam 0: "),
                           ({"max_tokens": 10}, "option 'max_tokens'")]:
        with pytest.raises(ValueError, match=words):
            decoding_of(options)


def test_load_test_refuses_other_machines_and_unbounded_runs():
    for url in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        check_loopback(url)
    for url in ("http://10.1.2.3:8000", "http://0.0.0.0:8000", "http://192.0.2.1"):
        with pytest.raises(ValueError, match="only targets this machine"):
            check_loopback(url)
    for kwargs, words in [({"clients": 0, "requests": 1}, "--clients 0"),
                          ({"clients": 300, "requests": 1}, "--clients 300"),
                          ({"clients": 10, "requests": 20_000}, "at most 100000"),
                          ({"clients": 1, "requests": 1, "time_limit_s": 0}, "--time-limit 0"),
                          ({"clients": 1, "requests": 1, "libre_share": 1.5}, "--libre-share 1.5")]:
        with pytest.raises(ValueError, match=words):
            run_loadtest(SHIPPED, TEST_DE, **kwargs)
