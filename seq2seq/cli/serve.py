"""``seq2seq-serve``: an HTTP translation server and the attention explorer.

    seq2seq-serve -m data/models/multi30k_de_en_tiny.ckpt            # http://127.0.0.1:8000/
    seq2seq-serve -m de_en=avg.ckpt -m en_de=runs/en_de/avg.ckpt --port 8080

Endpoints: POST /translate, POST /attention, GET /health, GET /models; the explorer at /,
the OpenAPI schema at /openapi.json. LibreTranslate's API (POST /translate, POST /detect,
GET /languages, ...) is under /libretranslate/: give its clients
http://HOST:PORT/libretranslate/. With --api libretranslate it is at the root instead (give
clients http://HOST:PORT/) and ours and the explorer are under /seq2seq/.
Every checkpoint is loaded once; our API picks one by name (the file's stem, or NAME in
-m NAME=PATH; the first is the default), LibreTranslate's by language pair. Listens on
127.0.0.1 unless --host says otherwise; without --api-keys there is no authentication.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import socket
import sys
import typing

from seq2seq.cli.common import (
    Parser,
    add_model_argument,
    add_options,
    check_device,
    flag,
    load_from_args,
    note_compute_type,
    run_command,
)
from seq2seq.config import ConfigError, LoadConfig, ServeConfig
from seq2seq.extras import install_hint

PROG = "seq2seq-serve"

# flag dest -> help; every default is None = the ServeConfig default (one home for defaults)
_OPTIONS = {
    "host": (str, "address to listen on; anything but loopback is reachable from other machines"),
    "port": (int, "TCP port (0 = any free port)"),
    "api": (str, "the API at the server root; the other is under a prefix (/libretranslate/ "
                 "or /seq2seq/)"),
    "window_ms": (float, "collection window: requests arriving within it share a model call"),
    "max_batch_tokens": (int, "source tokens per padded batch within a model call"),
    "max_texts": (int, "texts per /translate request"),
    "max_text_chars": (int, "characters per text"),
    "max_beam": (int, "largest beam a request may ask for"),
    "max_nbest": (int, "largest n-best a request may ask for"),
    "threads": (int, "torch threads for the model (default: torch's choice)"),
    "compile": (str, "float32 models: the decoder step and encoder compiled for small "
                     "batches (one sentence about twice as fast); background: answer at once "
                     "and compile beside the requests (once per machine and model, cached); "
                     "start: before listening; off: eager only"),
    "api_keys": (str, "file of API keys, one 'KEY [REQUESTS_PER_MINUTE]' a line: requests "
                      "without a valid key get 403"),
    "req_limit": (int, "requests per minute per API key (a key's own line may say otherwise), "
                       "and per client address for LibreTranslate requests without a key"),
    "require_api_key_origin": (str, "with --api-keys: a LibreTranslate request without a key "
                                    "is refused unless its Origin header matches this regular "
                                    "expression (default: served under --req-limit)"),
    "max_body_bytes": (int, "request body size, counted while reading (chunked too)"),
    "max_work": (int, "work of one request, summed over its texts; a text's work is its max "
                      "output length x (source + max output length) x beam (or samples)"),
    "max_response_bytes": (int, "estimated size of one answer"),
    "max_unsent_bytes": (int, "answers made but not yet read by their clients, over all "
                              "connections; past it requests get 503 with Retry-After"),
    "call_work": (int, "work per model call, and the most one text may take: bigger requests "
                       "are cut into pieces that take turns with other requests"),
    "request_timeout_s": (float, "seconds a request may take before it gets 503"),
    "max_queue": (int, "translation requests in progress; more, or work that cannot end within "
                       "--request-timeout-s at the measured speed, get 503 at once with Retry-After"),
    "max_connections": (int, "open connections; more are closed at once (503 past it for requests)"),
    "header_timeout_s": (float, "seconds for a request's headers to arrive"),
    "body_timeout_s": (float, "seconds to wait for each piece of a request body"),
    "keep_alive_s": (int, "seconds an idle kept-alive connection stays open"),
    "max_header_bytes": (int, "bytes of an unfinished request line + headers held in memory"),
    "log_per_minute": (int, "each kind of log message at most this often"),
}


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, append=True, metavar="[NAME=]CKPT",
                       help="a checkpoint to serve (repeat -m for several models)")
    d, hints = ServeConfig(), typing.get_type_hints(ServeConfig)
    for dest, (kind, text) in _OPTIONS.items():
        literal = typing.get_origin(hints[dest]) is typing.Literal
        ap.add_argument("--" + dest.replace("_", "-"), dest=dest, type=kind,
                        choices=typing.get_args(hints[dest]) if literal else None,
                        metavar="FILE" if dest == "api_keys" else None,
                        help=f"{text} (default {getattr(d, dest)})")
    ap.add_argument("--device", default="cpu", help="torch device (default cpu)")
    # load-time options (requests cannot change them); --compile: ServeConfig's, above
    add_options(ap, LoadConfig, skip=("compile",))
    ap.add_argument("--log-level", default="info",
                    choices=["critical", "error", "warning", "info", "debug"])
    return ap


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    given = {k: getattr(args, k) for k in _OPTIONS if getattr(args, k) is not None}
    try:
        return dataclasses.replace(ServeConfig(), **given)
    except ConfigError as e:  # name the flag, not the field: "ServeConfig.window_ms" -> "--window-ms"
        field = e.field or str(e).split()[0].removeprefix("ServeConfig.")  # its own checks
        raise ValueError(str(e).replace(f"ServeConfig.{field}", flag(field), 1)) from None


def _is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


def run(args: argparse.Namespace) -> None:
    cfg = config_from_args(args)
    try:
        import torch

        from seq2seq.serving import bind, create_app, load_models, serve
        from seq2seq.serving.server import url_of
    except ImportError as e:  # the serve extra is optional
        raise ValueError(f"{e.name} is not installed: {install_hint('serve')}") from None
    check_device(args.device)
    sock = bind(cfg.host, cfg.port)  # a busy port fails before the models load
    if not _is_loopback(cfg.host) and cfg.api_keys is None:
        print(f"{PROG}: warning: listening on {cfg.host}: reachable from other machines, "
              "with no authentication (see --api-keys)", file=sys.stderr)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    load = {**load_from_args(args), "compile": cfg.compile == "start"}
    models = load_models(args.checkpoint, device=args.device,
                         background_compile=cfg.compile == "background", **load)
    for served in models.values():
        note_compute_type(PROG, args.compute_type, served.translator.compute_type)
    app = create_app(models, cfg)
    url = url_of(sock)
    ours, libre = (url + "/seq2seq", url) if cfg.api == "libretranslate" else (url, url + "/libretranslate")
    print(f"{PROG}: {', '.join(models)} at {ours}/translate; LibreTranslate clients: "
          f"{libre}/; explorer {ours}/; OpenAPI schema {ours}/openapi.json", file=sys.stderr)
    serve(app, sock, log_level=args.log_level)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
