"""Option parsers and the output-path check shared by the bench commands."""


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def strs(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def check_out(path, flag: str, *, folder: bool = False, files=(), json_beside: bool = False):
    """Check an output path before any work starts; create nothing.

    Parameters
    ----------
    path : str or os.PathLike
        The value of ``flag``: a file path (``folder=False``) or an output
        folder (``folder=True``; missing folders are created later by the
        writer, so only the nearest existing ancestor must be a writable folder).
    flag : str
        The option name, e.g. ``"--out"``, quoted in the error.
    files : sequence of str
        With ``folder=True``: the file names the command will write inside it.
    json_beside : bool
        With ``folder=False``: the command also writes the JSON beside the file
        (same stem, ``.json``; :func:`resispec._io.write_markdown_and_json`).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        Empty path; a file path that is a directory (or a folder path that is a
        file); a target file that exists but is not writable; a nearest existing
        ancestor that is a file or not a writable folder.  The message names
        ``flag`` and says what to give instead.
    """
    import os
    from pathlib import Path

    if path is None or str(path) == "":
        raise ValueError(f"{flag} must be a non-empty path")
    p = Path(path)
    if folder:
        if p.exists() and not p.is_dir():
            raise ValueError(f"{flag} {str(path)!r} is a file, not a folder; give an output folder")
        base, targets = p, [p / f for f in files]
    else:
        if p.is_dir():
            raise ValueError(f"{flag} {str(path)!r} is a directory; give a file path such as "
                             f"{str(p / 'report.md')!r}")
        stem, ext = os.path.splitext(str(p))
        targets = [p] + ([Path((stem if ext else str(p)) + ".json")] if json_beside else [])
        base = p.parent
    for t in targets:
        if t.is_dir():
            raise ValueError(f"{flag} {str(path)!r}: {str(t)!r} is a directory and cannot be written as a file")
        if t.exists() and not os.access(t, os.W_OK):
            raise ValueError(f"{flag} {str(path)!r}: {str(t)!r} exists and is not writable")
    anc = base
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise ValueError(f"{flag} {str(path)!r}: {str(anc)!r} is a file, not a folder; give a path in a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(path)!r}: folder {str(anc)!r} is not writable; give a writable path")
    return p
