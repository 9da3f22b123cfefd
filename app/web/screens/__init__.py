"""The dashboard's pages, one Streamlit script each (run by ``st.navigation`` from ``main.py``).

This folder must not be called ``pages``: a ``pages/`` folder next to the entry script switches
Streamlit to its older automatic multipage mode, which ignores ``st.navigation`` on first load.
"""
