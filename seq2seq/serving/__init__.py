"""Serving (``seq2seq-serve``): an HTTP API for translation and attention weights, with
micro-batching, LibreTranslate's API under ``/libretranslate/``, and the attention explorer.
Needs the ``serve`` extra (FastAPI, uvicorn, ...)."""

from seq2seq.serving.api import Server
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import MicroBatcher
from seq2seq.serving.models import ServedModel, load_models
from seq2seq.serving.server import bind, running, serve

__all__ = ["MicroBatcher", "ServedModel", "Server", "bind", "create_app", "load_models",
           "running", "serve"]
