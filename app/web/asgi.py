"""What ``gpuscope ui`` serves: the dashboard (``main.py``) in Streamlit's ASGI app, behind the
upload guard (``upload_guard.py``), which refuses an upload before its body is read unless the
request may make one, and the page's server address (``backend_url.py``: deep links make no
404 probes)."""

import streamlit as st
from gpuscope.web.backend_url import BackendBaseUrl
from gpuscope.web.upload_guard import UploadGuard
from starlette.middleware import Middleware

app = st.App("main.py", middleware=[Middleware(UploadGuard), Middleware(BackendBaseUrl)])
