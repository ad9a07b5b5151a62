"""Screenshot of the attention explorer for the README (headless chromium via Playwright).

    python scripts/explorer_screenshot.py -m data/models/multi30k_de_en_tiny.ckpt -o data/results/explorer.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

from seq2seq.serving import create_app, load_models, running


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", dest="checkpoint", default="data/models/multi30k_de_en_tiny.ckpt")
    ap.add_argument("-o", "--output", default="data/results/explorer.png")
    ap.add_argument("--text", default="Eine Frau mit rotem Hut liest ein Buch im Park.")
    ap.add_argument("--piece", type=int, default=4, help="the target piece to point at")
    ap.add_argument("--layer", default="2")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    with running(create_app(load_models([args.checkpoint]))) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 900, "height": 600})
        page.goto(url + "/")
        page.fill("#text", args.text)
        page.click("#translate")
        page.wait_for_selector("#tgt .piece", timeout=60_000)
        page.select_option("#layer", args.layer)
        page.hover(f"#tgt .piece >> nth={args.piece}")
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=args.output, full_page=True)
        browser.close()
    print(args.output)


if __name__ == "__main__":
    main()
