"""zndraw-joblib's ``ApiManager`` protocol over a plain ``httpx.Client``: what its
``JobManager`` is handed in the processes that run it against Taskhub (the SDK benchmark's
``sdk_joblib_worker``, the compatibility tests' ``tests/system/joblib_worker.py``). Never
imports Taskhub: zndraw-joblib's models and Taskhub's share SQLModel's metadata."""

from __future__ import annotations

import httpx


class RestApi:
    """zndraw-joblib's ``ApiManager`` protocol over a plain ``httpx.Client``."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0) -> None:
        self.http = httpx.Client(timeout=timeout, trust_env=False)
        self._base_url = base_url
        self._token = token

    @property
    def base_url(self) -> str:
        return self._base_url

    def get_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def raise_for_status(self, response: httpx.Response) -> None:
        """404 → KeyError, 401/403 → PermissionError, 409/422 → ValueError, else httpx's."""
        code = response.status_code
        if code == 404:
            raise KeyError(response.text)
        if code in (401, 403):
            raise PermissionError(response.text)
        if code in (409, 422):
            raise ValueError(response.text)
        response.raise_for_status()
