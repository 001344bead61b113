"""Data the config checks and the components both read, below both: the pinned versions, charts and
compatibility rows (`*_versions.py`, `chart.py`), the dated Kubernetes version calendar's reader
(`versions_calendar.py`) and the Linode kubelet reservations (`linode_kubelet.py`).

Nothing here imports the rest of the program, so reading a pin never runs a component's package.
"""
