"""`arena dashboard`: a local web page over the run index (runs, curves, plan, checkpoints,
population), with a JSON API and live updates over server-sent events.

data.py reads run directories robustly, app.py is the FastAPI app and its API, pages.py renders
HTML, guard.py adds the browser sign-in and Host checks in front of the deploy server's auth,
server.py starts it; static/ holds the page's only script and stylesheet (shipped in the wheel).
"""
