"""What ``gpuscope ui`` serves: the dashboard (``main.py``) in Streamlit's ASGI app, behind the
upload guard (``upload_guard.py``), which refuses an upload before its body is read unless the
request may make one."""

import streamlit as st
from gpuscope.web.upload_guard import UploadGuard
from starlette.middleware import Middleware

app = st.App("main.py", middleware=[Middleware(UploadGuard)])
