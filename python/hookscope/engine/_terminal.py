"""Text from a file, for a terminal."""


def printable(text):
    """`text` with what is not printable escaped (\\x1b), so that names from a file cannot drive
    the terminal, as hookscope-cli prints them."""
    return "".join(c if c.isprintable() else "\\x%02x" % ord(c) for c in text)
