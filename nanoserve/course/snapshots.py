"""Widgets that a saved notebook shows as a picture of their first state until the kernel runs them."""
import base64
import io


def display_with_snapshot(widget, *, figure=None, text=None) -> None:
    """Display `widget`; a viewer that cannot run it (a notebook just opened) shows `figure` or `text`."""
    from IPython.display import display

    bundle = dict(widget._repr_mimebundle_())
    if figure is not None:  # JupyterLab renders an untrusted output with its richest safe type: this PNG
        buf = io.BytesIO()
        figure.savefig(buf, format="png", bbox_inches="tight")
        bundle["image/png"] = base64.b64encode(buf.getvalue()).decode()
    if text is not None:
        bundle["text/plain"] = text
    display(bundle, raw=True)
