"""optuna-dashboard with hlnas's figures, kept current while a study runs.

* :func:`attach_figures` saves every figure of :mod:`hlnas.analysis.figures` into a study with
  ``optuna_dashboard.save_plotly_graph_object`` under stable ids, so saving again replaces them;
  the dashboard shows them on the study's page.
* :func:`serve` / :func:`start_server` run the dashboard's WSGI app on a threaded ``wsgiref`` server
  we control, plus a :class:`FigureRefresher` thread that re-attaches the figures of every hlnas study
  (one with an ``hlnas_version`` user attr) whenever its number of finished trials changes. The browser
  page polls the study, so new figures appear without restarting anything.

Bad input fails before anything starts: an unknown study names the available ones, a bad storage URL
names the URL and the allowed schemes, a port in use names the port and suggests ``--port``.
The dashboard stores a figure in chunks of study system attrs, written one by one, so a page could read a
half-written figure. The server here holds the study-detail API while its refresher writes (one lock);
another process calling :func:`attach_figures` on a served study can still be caught mid-write, and the
page then logs a JSON error once and shows the whole figure at its next poll.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import re
import socketserver
import threading
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna

from hlnas.errors import ConfigError, HlnasError
from hlnas.analysis.figures import FIGURE_IDS, build_figures
from hlnas.analysis.pareto import ALLOWED_SCHEMES, StorageError, UnknownStudyError, load_study, open_storage, study_data

__all__ = [
    "StorageError", "UnknownStudyError", "PortInUseError", "ALLOWED_SCHEMES", "open_storage", "load_study",
    "attach_figures", "FigureRefresher", "DashboardServer", "start_server", "serve",
]  # fmt: skip

log = logging.getLogger("hlnas.analysis.dashboard")

_FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)


class PortInUseError(HlnasError, OSError):
    """The dashboard's port is taken."""


def attach_figures(study: optuna.Study, lock: threading.Lock | None = None) -> list[str]:
    """Save every hlnas figure of ``study`` into it for optuna-dashboard; returns their ids (:data:`FIGURE_IDS`).

    ``lock`` is held while writing only (the figures are built before), so readers sharing it never see
    a half-written figure.
    """
    from optuna_dashboard import save_plotly_graph_object

    figures = build_figures(study_data(study))
    with lock or contextlib.nullcontext():
        for graph_id, fig in figures.items():
            save_plotly_graph_object(study, fig, graph_object_id=graph_id)
    return list(figures)


@dataclass
class FigureRefresher:
    """Re-attaches figures to each hlnas study whose count of finished trials changed since the last pass."""

    storage: optuna.storages.BaseStorage
    refresh_s: float = 5.0
    study_names: tuple[str, ...] | None = None  # None: every hlnas study in the storage
    lock: threading.Lock = field(default_factory=threading.Lock)  # shared with the server's study-detail route
    seen: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # study -> last error, for the log and tests
    failures: dict[str, Exception] = field(default_factory=dict, repr=False)  # study -> its last exception
    url: str | None = None  # the storage's URL, to say in the log what a failing storage means
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def refresh_once(self, log_errors: bool = True) -> list[str]:
        """One pass; returns the names of the studies whose figures were re-attached. A study that fails is logged
        in one line (unless not ``log_errors``) and kept in :attr:`failures`; the others go on."""
        done = []
        for summary in optuna.get_all_study_summaries(self.storage, include_best_trial=False):
            name = summary.study_name
            if (self.study_names is not None and name not in self.study_names) or "hlnas_version" not in summary.user_attrs:
                continue
            try:
                study = optuna.load_study(study_name=name, storage=self.storage)
                n = len(study.get_trials(deepcopy=False, states=_FINISHED))
                if self.seen.get(name) != n:
                    attach_figures(study, self.lock)
                    self.seen[name] = n
                    done.append(name)
                self.errors.pop(name, None)
            except Exception as e:  # one broken study must not stop the others' figures
                if log_errors and self.errors.get(name) != repr(e):  # one line, once per new error: it keeps serving
                    log.error("hlnas figures for study '%s' failed: %s", name, self.describe(e))
                self.errors[name] = repr(e)
                self.failures[name] = e
        return done

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hlnas-figure-refresher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh_once()
            except Exception as e:  # the storage went away for a moment: try again next pass
                log.error("hlnas figure refresh failed: %s", self.describe(e))

    def describe(self, e: BaseException) -> str:
        """``e`` in one line: what a failing storage means (damaged, locked, full: as status says it), else the
        exception's type and first line."""
        if self.url is not None:
            from hlnas.search.storage import storage_failure

            failure = storage_failure(e, self.url)
            if failure is not None:
                return str(failure).strip().splitlines()[0]
        return _one_line(e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.refresh_s))


def _one_line(e: BaseException) -> str:
    """An exception as one log line: its type and its message's first line (no traceback)."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


_STUDY_DETAIL = re.compile(r"^/api/studies/\d+/?$")  # the route that returns the saved figures


def _guarded(app, lock: threading.Lock):
    """Serve the study-detail route under ``lock`` so it never reads a figure the refresher is writing."""

    def guarded(environ, start_response):
        if _STUDY_DETAIL.match(environ.get("PATH_INFO", "")):
            with lock:
                return list(app(environ, start_response))  # the body is built inside the lock
        return app(environ, start_response)

    return guarded


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # the page fetches several API routes at once


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (stdlib signature)
        log.debug("%s - %s", self.address_string(), format % args)


@dataclass
class DashboardServer:
    """A running dashboard; ``port`` is the bound one (pass port=0 to :func:`start_server` for a free port)."""

    host: str
    port: int
    storage: optuna.storages.BaseStorage
    refresher: FigureRefresher
    httpd: WSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/dashboard/"

    def study_url(self, study_name: str) -> str:
        return f"{self.url}studies/{self.storage.get_study_id_from_name(study_name)}"

    def stop(self) -> None:
        self.refresher.stop()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5.0)


def start_server(
    storage_url: str | optuna.storages.BaseStorage,
    host: str = "127.0.0.1",
    port: int = 8080,
    refresh_s: float = 5.0,
    study_name: str | None = None,
) -> DashboardServer:
    """Start the dashboard and the figure refresher in background threads; figures are attached first."""
    import optuna_dashboard

    if not refresh_s > 0:
        raise ConfigError(f"refresh_s must be > 0 seconds, got {refresh_s}")
    storage = open_storage(storage_url)
    if study_name is not None:
        load_study(storage, study_name)
    refresher = FigureRefresher(storage, refresh_s, (study_name,) if study_name else None,
                                url=storage_url if isinstance(storage_url, str) else None)
    app = _guarded(optuna_dashboard.wsgi(storage), refresher.lock)
    try:
        httpd = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(
                f"port {port} on {host} is already in use (another dashboard?); choose another with --port, e.g. --port {port + 1}"
            ) from e
        raise HlnasError(f"cannot listen on {host}:{port}: {e.strerror or e}; check --host and --port") from e
    try:
        refresher.refresh_once(log_errors=False)
        for name, e in refresher.failures.items():
            if refresher.describe(e) != _one_line(e):  # a damaged, locked or unreadable storage: refused, as status does
                raise e
            log.error("hlnas figures for study '%s' failed: %s", name, _one_line(e))
    except BaseException:
        httpd.server_close()  # do not keep the port after a failed start
        raise
    refresher.start()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="hlnas-dashboard", daemon=True)
    thread.start()
    return DashboardServer(host, httpd.server_address[1], storage, refresher, httpd, thread)


def serve(
    storage_url: str | optuna.storages.BaseStorage,
    host: str = "127.0.0.1",
    port: int = 8080,
    refresh_s: float = 5.0,
    study_name: str | None = None,
) -> None:
    """Serve optuna-dashboard with hlnas figures until Ctrl-C (see :func:`start_server`)."""
    server = start_server(storage_url, host, port, refresh_s, study_name)
    where = server.study_url(study_name) if study_name else server.url
    print(f"hlnas dashboard: {where}  (figures {', '.join(FIGURE_IDS)} refresh every {refresh_s:g} s; Ctrl-C stops)", flush=True)
    try:
        while server.thread.is_alive():
            server.thread.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
