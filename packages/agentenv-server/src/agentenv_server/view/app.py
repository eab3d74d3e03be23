"""The viewer's web app: server-rendered pages (Jinja2, every value escaped) under a random token in the path.

No script runs on any page: the pages are plain HTML, the chart is SVG drawn here, and every answer carries a
Content-Security-Policy that allows no script at all, so a transcript (hostile input: the policy wrote it) that a
bug let through unescaped still could not run. The token in the path is the only way in: a request without it is
answered 404, so another local user or a web page guessing ports finds nothing.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from .data import KEPT_OUT_WARNING, Filters, Run

__all__ = ["CSP", "build_viewer"]

HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STATIC = {"view.css": "text/css", "icon.svg": "image/svg+xml"}  # every asset the pages use, shipped here


def build_viewer(run: Run, token: str, *, compare: Run | None = None) -> FastAPI:
    """The viewer of ``run`` (and ``compare``, B against A on the summary), served under ``/{token}/``."""
    pages = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    base = f"/{token}"
    comparison = _compared(run, compare)

    def page(name: str, **values: Any) -> HTMLResponse:
        html = pages.get_template(name).render(base=base, run=run, **values)
        return HTMLResponse(html, headers=_HEADERS)

    def allowed(given: str) -> bool:
        return hmac.compare_digest(given.encode(), token.encode())

    @app.get("/{given}/")
    async def episodes(given: str, request: Request) -> Response:
        if not allowed(given):
            return _missing()
        filters = Filters.of(request.query_params)
        return page("episodes.html", rows=[r for r in run.rows if filters.keep(r)], filters=filters.__dict__)

    @app.get("/{given}/episode/{key}")
    async def episode(given: str, key: str) -> Response:
        row = run.row(key) if allowed(given) else None
        return page("episode.html", row=row) if row is not None else _missing()

    @app.get("/{given}/summary")
    async def summary(given: str) -> Response:
        if not allowed(given):
            return _missing()
        over = run.over_time()
        return page(
            "summary.html",
            summary=run.summary(),
            kept_out=run.kept_out(),
            warning=KEPT_OUT_WARNING,
            chart=_chart(over),
            comparison=comparison,
        )

    @app.get("/{given}/static/{name}")
    async def static(given: str, name: str) -> Response:
        media = _STATIC.get(name)
        if not allowed(given) or media is None:
            return _missing()
        return FileResponse(HERE / "static" / name, media_type=media, headers=_HEADERS)

    return app


def _missing() -> Response:
    return Response("not found\n", status_code=404, media_type="text/plain", headers=_HEADERS)


def _compared(run: Run, other: Run | None) -> Any:
    if other is None:
        return None
    from agentenv.evaluate import compare

    return compare(run.summary(), other.summary(), a_name=run.name, b_name=other.name)


def _chart(points: list[dict[str, Any]], width: int = 720, height: int = 240) -> dict[str, Any]:
    """The summary's SVG chart: mean reward and failure rate per run of rollouts, on one 0..1 axis."""
    left, top, right, bottom = 44, 10, 10, 30
    inner_w, inner_h = width - left - right, height - top - bottom

    def y(value: float) -> float:
        return round(top + inner_h * (1.0 - value), 1)

    def x(n: int) -> float:
        return round(left + (inner_w * n / (len(points) - 1) if len(points) > 1 else inner_w / 2), 1)

    reward = " ".join(f"{x(n)},{y(p['reward'])}" for n, p in enumerate(points) if p["reward"] is not None)
    failed = " ".join(f"{x(n)},{y(p['failed'])}" for n, p in enumerate(points))
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "inner_width": inner_w,
        "inner_height": inner_h,
        "ticks": [{"y": y(v), "label": f"{v:g}"} for v in (0.0, 0.25, 0.5, 0.75, 1.0)],
        "warning_y": y(KEPT_OUT_WARNING),
        "reward": reward,
        "failed": failed,
        "first": points[0]["first"] if points else 0,
        "last": points[-1]["last"] if points else 0,
    }
