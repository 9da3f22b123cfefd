"""What ``gpuscope ui`` serves: the dashboard (``main.py``) in Streamlit's ASGI app, behind the
sign-in seal (``auth.SignInSeal``: the seal set beside Streamlit's sign-in cookie, and sign-in
cookies that do not hold taken off every request), the upload guard (``upload_guard.py``), which
refuses a request to the upload endpoint before its body is read unless the request may make it,
and the page's server address (``backend_url.py``: deep links make no 404 probes)."""

import streamlit as st
from gpuscope.web.auth import SignInSeal
from gpuscope.web.backend_url import BackendBaseUrl
from gpuscope.web.upload_guard import UploadGuard
from starlette.middleware import Middleware

app = st.App(
    "main.py",
    middleware=[Middleware(SignInSeal), Middleware(UploadGuard), Middleware(BackendBaseUrl)],
)
