"""Zip packages of XML parts (.docx, .pptx, .odt, .odp, .epub): the one check every such
document passes before it is read, the safe XML parser it is read with, and the zip written
back with its changed parts.

A package is refused in one line naming the file when it is not a zip, when it would unpack
to more than ``MAX_UNPACKED`` bytes (a small zip may unpack to gigabytes: the sizes its
directory declares are what reading may unpack, ``zipfile`` refuses more), when an XML part
is not well-formed, or when an XML part declares entities (a DTD's internal subset: how
billion laughs and external files get in). Office formats never have a ``<!DOCTYPE>`` at
all; EPUB's XHTML may name one (``<!DOCTYPE html>``, XHTML 1.1's), which is never loaded.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib

MAX_UNPACKED = 64 * 2**20  # bytes a package may unpack to
# Characters XML 1.0 cannot hold (lxml refuses them): never written into a part.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_BROKEN_ZIP = (zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError, zlib.error,
               ValueError)


class DocumentError(ValueError):
    """A document that cannot be read as what its name says (one line, no traceback)."""


def parser():
    """lxml's parser that never expands entities, loads a DTD or reaches the network."""
    from lxml import etree

    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                           remove_blank_text=False)


def open_zip(data: bytes, name: str, ext: str) -> zipfile.ZipFile:
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise DocumentError(f"{name}: not a {ext} file (not a zip archive)")
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except _BROKEN_ZIP as e:
        raise DocumentError(f"{name}: not a {ext} file ({e})") from None


def read_part(z: zipfile.ZipFile, part: str, name: str, ext: str) -> bytes:
    try:
        return z.read(part)
    except KeyError:
        raise DocumentError(f"{name}: not a {ext} file (no {part} in it)") from None
    except _BROKEN_ZIP as e:
        raise DocumentError(f"{name}: not a {ext} file ({part}: {e})") from None


def check_package(data: bytes, name: str, what: str, ext: str, xml_parts: tuple[str, ...],
                  doctype: bool = False) -> dict:
    """``data`` checked as a package (see the module's docstring): ``what`` names the format
    in errors ("a Word (.docx) document"), ``xml_parts`` are the endings of the parts that
    are XML; a bare ``<!DOCTYPE>`` only with ``doctype``. The parsed XML parts by name."""
    from lxml import etree

    trees = {}
    with open_zip(data, name, ext) as z:
        unpacked = sum(i.file_size for i in z.infolist())
        if unpacked > MAX_UNPACKED:
            raise DocumentError(f"{name}: unpacks to {unpacked} bytes; documents may unpack to "
                                f"at most {MAX_UNPACKED}")
        for part in z.namelist():
            if not part.lower().endswith(xml_parts):
                continue
            raw = read_part(z, part, name, ext)
            try:
                tree = etree.fromstring(raw, parser()).getroottree()
            except etree.XMLSyntaxError as e:
                why = re.sub(r" \(<string>, line \d+\)$", "", str(e))  # lxml's, about no file
                raise DocumentError(f"{name}: not {what} ({part} is not well-formed XML: "
                                    f"{why})") from None
            dtd = tree.docinfo.internalDTD  # a bare <!DOCTYPE> too, with nothing declared
            declared = dtd is not None and (any(dtd.iterentities()) or any(dtd.iterelements()))
            if declared or (dtd is not None and not doctype):
                raise DocumentError(f"{name}: not {what} ({part} declares a DTD (<!DOCTYPE ...>"
                                    f"{' with entities' if doctype else ''}), which "
                                    f"{ext} files never have)")
            trees[part] = tree
    return trees


def serialize(tree) -> bytes:
    """An XML part as it was read: its declaration, encoding and standalone flag kept."""
    from lxml import etree

    info = tree.docinfo
    return etree.tostring(tree, xml_declaration=True, encoding=info.encoding or "UTF-8",
                          standalone=info.standalone)


def rebuild(data: bytes, changed: dict[str, bytes]) -> bytes:
    """The zip ``data`` with the parts in ``changed`` replaced; every entry in its order with
    its own compression, ``mimetype`` (ODF, EPUB) first and stored, as readers require."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as z, zipfile.ZipFile(out, "w") as w:
        entries = sorted(z.infolist(), key=lambda i: i.filename != "mimetype")
        for info in entries:
            body = changed.get(info.filename)
            if info.filename == "mimetype":
                info.compress_type = zipfile.ZIP_STORED
            w.writestr(info, z.read(info) if body is None else body)
    return out.getvalue()


def primary(code: str | None) -> str:
    """A language tag's primary subtag, lowercase (``de-DE`` -> ``de``)."""
    return re.split(r"[-_]", (code or "").strip().lower())[0]


def in_source(code: str | None, source_lang: str | None) -> bool:
    """A label worth relabelling: a language, the source's (any when that is not known)."""
    return bool(primary(code)) and (source_lang is None or primary(code) == primary(source_lang))
