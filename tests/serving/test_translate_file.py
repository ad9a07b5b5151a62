"""LibreTranslate's file routes (seq2seq.serving.libre.files) in the app: upload, translated file
by URL, LibreTranslate's error texts, bounds, the store's limits, names that are never paths."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="needs the serve extra")
pytest.importorskip("docx", reason="needs the documents extra")
from fastapi.testclient import TestClient  # noqa: E402
from helpers import DE_EN, docx_with  # noqa: E402

from seq2seq.config import ServeConfig  # noqa: E402
from seq2seq.serving.app import create_app  # noqa: E402
from seq2seq.serving.libre import files  # noqa: E402
from seq2seq.serving.models import load_models  # noqa: E402

URL = "/libretranslate/"


@pytest.fixture(scope="module")
def client(one_thread):
    with TestClient(create_app(load_models([str(DE_EN)]))) as c:
        yield c


def upload(client, name: str, data: bytes, **fields):
    form = {"source": "de", "target": "en", **fields}
    return client.post(URL + "translate_file", data=form, files={"file": (name, data)})


def test_a_document_comes_back_translated_by_url(client):
    from seq2seq import Translator
    page = "<p>Ein <b>Hund</b> läuft.</p>".encode()
    got = upload(client, "seite.html", page)
    assert got.status_code == 200, got.text
    url = got.json()["translatedFileUrl"]
    assert url.startswith("http://testserver/libretranslate/download_file/") and url.endswith(".seite_en.html")
    down = client.get(url)
    assert down.status_code == 200
    assert down.headers["content-disposition"] == 'attachment; filename="seite_en.html"'
    assert down.headers["content-type"] == "text/html; charset=utf-8"
    plain = Translator.from_checkpoint(DE_EN).translate(["Ein Hund läuft."])[0]
    text = down.content.decode()
    assert text.startswith("<p>") and "<b>" in text
    assert text.replace("<b>", "").replace("</b>", "") == f"<p>{plain}</p>"



@pytest.mark.parametrize("source", ["de", "auto"])
def test_a_page_comes_back_labelled_in_the_target_language(client, source):
    page = '<html lang="de"><body><p>Ein Hund läuft durch den Schnee.</p></body></html>'
    got = upload(client, "seite.html", page.encode(), source=source)
    assert got.status_code == 200, got.text
    assert client.get(got.json()["translatedFileUrl"]).text.startswith('<html lang="en"><body><p>')

def test_subtitles_keep_their_timing_and_auto_detects_the_source(client):
    subs = b"1\n00:00:01,000 --> 00:00:02,000\nEin Hund.\n\n2\n00:00:03,000 --> 00:00:04,500\nEine Katze.\n"
    got = upload(client, "film.srt", subs, source="auto")
    assert got.status_code == 200, got.text
    text = client.get(got.json()["translatedFileUrl"]).content.decode()
    assert [line for line in text.splitlines() if "-->" in line] == [
        "00:00:01,000 --> 00:00:02,000", "00:00:03,000 --> 00:00:04,500"]


@pytest.mark.parametrize(("name", "data", "fields", "error"), [
    ("a.pdf", b"%PDF", {}, "Invalid request: file format not supported"),
    ("", b"x", {}, None),  # no file name: no file part at all, as a browser sends it
    ("a.txt", b"Hund", {"source": ""}, "Invalid request: missing source parameter"),
    ("a.txt", b"Hund", {"target": "xx"}, None),
    ("a.docx", b"not a zip", {}, "Invalid request: a.docx: not a .docx file (not a zip archive)"),
    ("a.txt", "Hund\xe4".encode("latin-1"), {}, "Invalid request: a.txt: not UTF-8 text (byte 4: 0xe4)"),
    ("a.docx", docx_with("word/document.xml", b"<w:document><w:body>"), {}, "Invalid request: a.docx: not a Word (.docx) "
     "document (word/document.xml is not well-formed XML: Namespace prefix w on document is not "
     "defined, line 1, column 12)"),
], ids=["pdf", "no file name", "no source", "unknown target", "docx not a zip", "not utf-8",
        "docx not well-formed"])
def test_bad_uploads_get_libretranslates_400(client, name, data, fields, error):
    got = upload(client, name, data, **fields)
    assert got.status_code in (400, 422), got.text
    if error:
        assert got.json() == {"error": error}


def test_a_missing_file_part_is_named(client):
    got = client.post(URL + "translate_file", data={"source": "de", "target": "en"})
    assert got.status_code == 400 and got.json() == {"error": "Invalid request: missing file parameter"}


def test_a_document_over_the_work_limit_is_refused(one_thread):
    app = create_app(load_models([str(DE_EN)]), ServeConfig(max_work=50_000))
    with TestClient(app) as c:
        got = upload(c, "a.txt", ("Ein Hund läuft durch den Schnee.\n" * 300).encode())
    assert got.status_code == 400 and "units of work" in got.json()["error"]


def test_download_names_are_never_paths(client):
    assert client.get(URL + "download_file/..%2F..%2Fetc%2Fpasswd").status_code == 404
    for name in ("nothing.txt", "x", "seq2seq-files-x"):
        got = client.get(URL + "download_file/" + name)
        assert got.status_code == 404 and "Invalid filename" in got.json()["error"]
    assert files.download_name("../../etc/pass wd.txt", "en") == "pass wd_en.txt"
    assert files.download_name("C:\\x\\..\\y.docx", "de") == "y_de.docx"


@pytest.mark.parametrize(("name", "data", "disposition", "media"), [
    ("日本.txt", b"Ein Hund.", "attachment; filename=\"file_en.txt\"; "
     "filename*=UTF-8''%E6%97%A5%E6%9C%AC_en.txt", "text/plain; charset=utf-8"),
    ("Brief.docx", None, 'attachment; filename="Brief_en.docx"',
     "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ("film.srt", b"1\n00:00:01,000 --> 00:00:02,000\nEin Hund.\n", 'attachment; filename="film_en.srt"',
     "application/x-subrip"),
    ("x" * 300 + ".txt", b"Ein Hund.", f'attachment; filename="{"x" * 193}_en.txt"',
     "text/plain; charset=utf-8"),
])
def test_downloads_are_named_as_libretranslate_names_them(client, name, data, disposition, media):
    """``NAME_<target>.EXT``, RFC 6266's ``filename*`` beyond ASCII, the extension's media
    type; a 300-character name (ENAMETOOLONG, a 500 after the work) is cut to 200 bytes."""
    if data is None:
        import docx
        d, out = docx.Document(), io.BytesIO()
        d.add_paragraph("Ein Hund.")
        d.save(out)
        data = out.getvalue()
    got = upload(client, name, data)
    assert got.status_code == 200, got.text
    down = client.get(got.json()["translatedFileUrl"])
    assert down.status_code == 200
    assert down.headers["content-disposition"] == disposition
    assert down.headers["content-type"] == media


@given(st.text(max_size=400), st.sampled_from(["en", "de", "pt-BR"]))
def test_a_download_name_is_a_short_base_name_with_the_target(filename, target):
    name = files.download_name(filename, target)
    assert len(name.encode()) <= files.MAX_NAME_BYTES and name.isprintable()
    assert not set(name) & set('/\\:*?"<>|') and not name.startswith((".", " "))
    assert f"_{target}" in name


@given(st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=300),
       st.sampled_from([".txt", ".docx", ".SRT"]))
def test_a_plain_name_keeps_its_stem_and_extension(stem, ext):
    name = files.download_name(f"some/folder/{stem}{ext}", "en")
    assert name.endswith(f"_en{ext}") and stem.startswith(name[:-len(f"_en{ext}")])
    assert name == f"{stem}_en{ext}" or len(name.encode()) > files.MAX_NAME_BYTES - 4


def test_the_store_keeps_a_bounded_number_of_files(monkeypatch):
    monkeypatch.setattr(files, "KEEP_FILES", 3)
    store = files.Store()
    names = [store.put(f"f{i}.txt", b"x") for i in range(5)]
    assert [store.get(n) is not None for n in names] == [False, False, True, True, True]
    assert len(list(Path(store._dir.name).iterdir())) == 3  # evicted files are deleted


def test_html_with_ninety_inline_tags_and_a_lone_less_than_is_one_text(client):
    page = "<p>" + " ".join("<i>Ei</i>" for _ in range(90)) + " &lt; Katze <3</p>"  # < 1000 chars
    got = client.post(URL + "translate", json={"q": page, "source": "de", "target": "en",
                                               "format": "html"})
    assert got.status_code == 200, got.text
    out = got.json()["translatedText"]
    assert out.count("<i>") == 90 and out.count("</i>") == 90 and "<3" not in out


def test_settings_offer_the_file_formats(client):
    got = client.get(URL + "frontend/settings").json()
    assert got["filesTranslation"] is True and set(got["supportedFilesFormat"]) == {
        ".txt", ".html", ".htm", ".docx", ".srt", ".odt", ".odp", ".pptx", ".epub"}


def test_a_served_file_translation_round_trip_over_http(tmp_path):
    """A real ``seq2seq-serve`` process: the answered URL is absolute and downloadable."""
    import httpx

    from scripts.bench.load import server_process
    subs = "1\n00:00:01,000 --> 00:00:02,000\nEin Hund läuft.\n".encode()
    with server_process([DE_EN]) as base:
        got = httpx.post(base + URL + "translate_file", data={"source": "de", "target": "en"},
                         files={"file": ("film.srt", subs)}, timeout=60)
        assert got.status_code == 200, got.text
        url = got.json()["translatedFileUrl"]
        assert url.startswith(base + URL + "download_file/")
        down = httpx.get(url, timeout=60)
        assert down.status_code == 200 and "00:00:01,000 --> 00:00:02,000" in down.text
        again = httpx.get(url.replace("/download_file/", "/download_file/x"), timeout=60)
        assert again.status_code == 404
