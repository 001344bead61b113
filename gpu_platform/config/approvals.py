"""What a recorded approval must say: who approved (an e-mail address or a @github-handle), why (a real
reason, not a placeholder) and, for an exception to a guardrail, until when.

One set of rules for every approval the project reads: a pool's approvedOnDemand (the stack config), an
exemptPools entry and a policy `exception` (a stack's policy config), an exception in
gpu_platform/policies/enforcement.yaml. Pure functions, no imports from the rest of the package: the config
model and the policy pack both use them.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Optional

# An exception is reviewed again at least once a year: `until` at most this far ahead.
MAX_EXCEPTION_DAYS = 366

# A reason must say something. It is read by a person, the approver is accountable for it, and the check
# only stops the reasons that are obviously not one (a placeholder, filler, keyboard mashing); it is not a
# judge of quality and no list here tries to name every non-reason. The rule: at least MIN_REASON_WORDS
# different words of its own once the words that carry no reason are dropped. Those are English function
# words (articles, pronouns, prepositions, conjunctions, auxiliaries), words that talk about the reason
# instead of giving one ("reason", "given", "because", "later", "see", "ticket") and placeholders ("tbd",
# "n/a", "asdf", "test"), also in the plural ("lorems"), doubled ("asdfasdf") or written with look-alike
# letters (Cyrillic "ТВD", "placeh0lder", "t.b.d."); a word has two different letters or more and is not a run of the alphabet or
# of a keyboard row ("abc", "def", "uiop"). No blocklist of whole phrases is needed: "no reason given",
# "to do later" or "see ticket" are made of such words. Three words can say why ("no spot market on Linode").
MIN_REASON_WORDS = 3

FUNCTION_WORDS = frozenset("""
    a an the this that these those it its it's they them their we us our you your he she him her his i me my
    and or but nor so yet if then than as at by for from in into of off on onto out over to up with within
    without via per about above below after before under until till upon against between through during
    is am are was were be been being do does did done doing have has had having will would shall should
    can could may might must not no nor all any some each every other such same own just only also too very
    here there where when what which who whom whose why how again once ever still now
""".split())

NON_REASON_WORDS = frozenset("""
    reason reasons reasoning given give giving because since cause why explain explained explanation
    later soon eventually someday tomorrow next time pending
    see ticket tickets issue issues jira pr link url doc docs documentation ref refs reference details detail
    info information context description notes note comment comments
    needed need needs required require requires requested request requests asked ask
    approve approved approval approving ok okay fine yes yeah sure agreed accepted allowed granted sign signed off
    fill filled write written provide provided add added update updated follow up
    something anything nothing everything whatever stuff things thing misc miscellaneous etc various usual
    standard normal default generic same above below mentioned
    justify justified justifies justifying justification justifications proper properly valid validly good
    real really actually basically obviously clearly please pls thanks thank
""".split())

# Words that stand for "I will write a reason later".
PLACEHOLDERS = frozenset("""
    tbd tba tbc todo fixme xxx xx na nope none null nil undefined empty blank test testing tests tested temp tmp
    placeholder asdf asdfgh qwerty qwer foo bar baz qux foobar lorem ipsum dolor sit amet dummy sample example
    whatever wip hack hmm meh blah bla ignore
    quux quuz corge grault garply waldo fred plugh xyzzy thud wibble wobble wubble flob fnord spam eggs ham
    hoge fuga piyo toto titi tata tutu
""".split())
# The last two lines are the metasyntactic variables (RFC 3092, "Etymology of Foo"; the Jargon File's
# "metasyntactic variable": foo ... thud, wibble, Python's spam/eggs/ham, Japanese hoge/fuga/piyo, French toto).

# Words that mark a whole text as unfinished wherever they stand ("TODO: fill in", "reason tbd").
UNFINISHED = frozenset({"tbd", "tba", "tbc", "todo", "fixme", "xxx", "placeholder", "lorem", "asdf", "wip"})

# Letters-only words ("n/a" is the words "n" and "a"; "h100_capacity" gives "capacity").
_WORD = re.compile(r"[^\W\d_]+")

# Letters that look like Latin ones (the Cyrillic and Greek entries of Unicode's confusables.txt, UTS #39,
# whose skeleton is one ASCII letter), folded before the words are judged: "ТВD" is "TBD". NFKC first
# folds full-width, ligature and compatibility forms ("ＴＢＤ", "ﬁx").
_LOOKALIKES = str.maketrans(
    "АВЕЅІЈКМНОРСТХУԁеһіјорсѕхуԛԝѵ" "ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαιικνορτυχ",
    "ABESIJKMHOPCTXYdehijopcsxyqwv" "ABEZHIKMNOPTYXaiiknoptux")
# Rows of the common Latin keyboard layouts (QWERTY, QWERTZ, AZERTY) and the alphabet: a word that is a
# run of one of them ("qwerty", "asdf", "uiop", "abc", "jkl") was typed without meaning anything.
_RUNS = ("qwertyuiop", "asdfghjkl", "zxcvbnm", "qwertzuiop", "yxcvbnm", "azertyuiop", "qsdfghjklm", "wxcvbn",
         "abcdefghijklmnopqrstuvwxyz")
_REPEATED = re.compile(r"(.{2,}?)\1+")


# A digit standing for the letter it looks like inside a word ("placeh0lder", "reas0n"; "h100" stays).
_DIGIT_LETTERS = {"0": "o", "1": "l", "3": "e", "4": "a", "5": "s", "7": "t"}
_DIGIT_IN_WORD = re.compile(r"(?<=[^\W\d_])[013457](?=[^\W\d_])")
# Letters written one by one: "t.b.d.", "n.a.", "T O D O" read as "tbd", "na", "todo" (_spelled_filler).
_SPELLED_OUT = re.compile(r"\b(?:[^\W\d_]\.){2,}|\b[^\W\d_](?: [^\W\d_]){2,}\b")


# "TO-DO", "to_do", "To-Do:" (a hyphen or underscore joins them; "GPUs to do training" stays two words).
_JOINED_TODO = re.compile(r"\bto[-_]+do\b")


def fold(text: str) -> str:
    """`text` as the checks read it: NFKC, look-alike letters as the Latin ones, lower case, digits inside a
    word as the letters they stand for, letters written one by one as one word, a hyphenated to-do as todo."""
    import unicodedata

    text = unicodedata.normalize("NFKC", text).translate(_LOOKALIKES).lower()
    text = _DIGIT_IN_WORD.sub(lambda m: _DIGIT_LETTERS[m.group()], text)
    text = _JOINED_TODO.sub("todo", text)
    return _SPELLED_OUT.sub(_spelled_filler, text)


def _spelled_filler(m: "re.Match[str]") -> str:
    """Letters written one by one, joined when they spell filler or a placeholder; kept as single letters
    (which never count) otherwise, so spelling out cannot make words of substance either."""
    joined = m.group().replace(".", "").replace(" ", "")
    return joined + " " if _in(joined, FUNCTION_WORDS, NON_REASON_WORDS, PLACEHOLDERS) else m.group()


def _root(word: str) -> str:
    """A doubled word as its unit ("asdfasdf" -> "asdf", "blahblah" -> "blah")."""
    m = _REPEATED.fullmatch(word)
    return m.group(1) if m else word


def _in(word: str, *lists: frozenset) -> bool:
    """`word`, or its singular ("lorems", "todos", "fixmes"), is in one of `lists`."""
    forms = (word, word[:-1]) if word.endswith("s") else (word,)
    return any(f in words for f in forms for words in lists)


def _typed_run(word: str) -> bool:
    return len(word) >= 3 and any(word in row for row in _RUNS)


def reason_words(text: str) -> list[str]:
    """The words of `text` that can carry a reason (see MIN_REASON_WORDS): letters only, folded (fold()), at
    least two different letters ("xxxxxxxx" is not a word), not a function word, a word about the reason or
    a placeholder (in the singular or doubled too), not a run of the alphabet or a keyboard row; each once,
    in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(fold(text)):
        root = _root(word)
        if len(set(word)) >= 2 and not _in(root, FUNCTION_WORDS, NON_REASON_WORDS, PLACEHOLDERS) \
                and not _typed_run(root):
            seen.setdefault(word)
    return list(seen)


# RFC 5322 dot-atom local part (atext), RFC 1035/5321 domain of LDH labels with an alphabetic TLD.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_TLD = re.compile(r"[A-Za-z]{2,63}")
# Names that receive no mail. Two kinds, told apart because one of them is the documentation's stand-in:
# - refused (email_problem): the top-level domains RFC 2606 section 2 reserves for tests, invalid names and
#   loopback (.test, .invalid, .localhost; RFC 6761 section 6): nobody writes them as a placeholder to replace,
#   and an alert sent there reaches nobody (the attacker review's budget-alert bypass);
# - a warning (config.checks.platform.reserved_alert_address_warnings): the names reserved for documentation,
#   the .example top-level domain and example.com, example.net, example.org (RFC 2606 sections 2 and 3; their DNS
#   publishes a null MX, RFC 7505), with every name under them: the shipped stacks and the docs use example.com
#   as the stand-in a user replaces, and no real domain would be an honest one; .example and example.com are
#   treated alike (the adopter review found one refused and the other accepted).
UNDELIVERABLE_TLDS = ("test", "invalid", "localhost")
DOCUMENTATION_TLDS = ("example",)
DOCUMENTATION_DOMAINS = ("example.com", "example.net", "example.org")


def documentation_mail_domain(address: str) -> Optional[str]:
    """The documentation name `address`'s domain falls under (".example", "example.com"), or None."""
    domain = address.rpartition("@")[2].lower().rstrip(".")
    for name in DOCUMENTATION_DOMAINS:
        if domain == name or domain.endswith("." + name):
            return name
    tld = domain.rpartition(".")[2]
    return "." + tld if tld in DOCUMENTATION_TLDS else None
# GitHub user names: 1 to 39 letters, digits and single hyphens, not starting or ending with one.
_GITHUB_HANDLE = re.compile(r"@[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` safe to print on a terminal: control characters (escape sequences that could forge or erase
    lines), bidirectional overrides and line separators shown as \\x.. / \\u.... escapes; newlines and tabs kept."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def one_line(text: str) -> str:
    """printable(), and newlines and tabs escaped too (a key or value echoed inside one message line)."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")


def email_problem(value: Any) -> Optional[str]:
    """None when `value` is an addr-spec of RFC 5322 (dot-atom form) within RFC 5321's lengths."""
    if not isinstance(value, str):
        return "an e-mail address such as ops@example.com"
    local, at, domain = value.rpartition("@")
    if not at or not local or len(value) > 254 or len(local) > 64 or not _LOCAL.fullmatch(local):
        return "an e-mail address such as ops@example.com (local part of letters, digits and !#$%&'*+/=?^_`{|}~-, dots between)"
    labels = domain.split(".")
    if len(labels) < 2 or len(domain) > 253 or not all(_LABEL.fullmatch(x) for x in labels) \
            or not _TLD.fullmatch(labels[-1]):
        return "an e-mail address whose domain is a DNS name such as example.com"
    if "{{" in local or "}}" in local or "{{" in value:
        # RFC 5322 atext admits { and }, but Alertmanager renders its `to:` as a Go template: {{ ... }} there
        # would be executed (or break the configuration), not mailed.
        return "an e-mail address without '{{' or '}}' (Alertmanager reads the address as a Go template)"
    if labels[-1].lower() in UNDELIVERABLE_TLDS:
        return (f"an e-mail address that can receive mail: .{labels[-1].lower()} is a reserved top-level domain "
                f"({', '.join('.' + t for t in UNDELIVERABLE_TLDS)}; RFC 2606 and RFC 6761), no mail is ever delivered there")
    return None


# Addresses no service the platform talks to may have (attacker review): a checkpoint store or mail relay
# there would send S3 keys, checkpoints or alert mail to the node's own metadata service (169.254.169.254 on
# Linode, GCP and AWS, which also serve fd00:a9fe:a9fe::/48 / fd00:ec2::254), the pod itself or nowhere.
NON_SERVICE_IPV4 = {"0.0.0.0/8": "'this network' (RFC 1122), no host", "127.0.0.0/8": "loopback: the pod itself",
                    "169.254.0.0/16": "link-local (RFC 3927), where the cloud's instance metadata service answers"}
METADATA_HOSTS = ("metadata.google.internal", "metadata")


def hostname_problem(value: str) -> Optional[str]:
    """None when `value` is a host name of RFC 1123 (LDH labels of 1 to 63, not starting or ending with
    '-', at most 253 in all) or a dotted IPv4 address outside NON_SERVICE_IPV4, and not a metadata server's name."""
    import ipaddress

    try:
        addr = ipaddress.IPv4Address(value)
    except ValueError:
        addr = None
    if addr is not None:
        for net, what in NON_SERVICE_IPV4.items():
            if addr in ipaddress.ip_network(net):
                return f"not {value}: {net} is {what}; give the service's own address or host name"
        return None
    labels = value.split(".")
    if len(value) > 253 or not all(_LABEL.fullmatch(x) for x in labels) or labels[-1].isdigit():
        return "a host name of letters, digits and '-' in dot-separated labels (RFC 1123), or an IPv4 address"
    if value.lower().rstrip(".") in METADATA_HOSTS:
        return f"not {value}: the cloud's instance metadata service; give the service's own address or host name"
    return None


def ssh_key_problem(value: str) -> Optional[str]:
    """None when `value` is one OpenSSH public key line that parses as a key (cryptography's
    load_ssh_public_key), with at most a comment of printable characters after it."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    if _CONTROL.search(value) or "\n" in value.strip():
        return "one OpenSSH public key per entry, without control characters or line breaks"
    parts = value.strip().split(None, 2)
    if len(parts) < 2:
        return "an OpenSSH public key: <type> <base64> [comment]"
    try:
        load_ssh_public_key(f"{parts[0]} {parts[1]}".encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError) as exc:
        return f"an OpenSSH public key that parses ({str(exc)[:80] or type(exc).__name__})"
    return None


# Local parts of addresses that by name reach nobody (attacker review: noreply@example.com approved an exemption).
NOBODY = re.compile(r"(?i)^(no-?reply|do-?not-?reply|nobody|null|devnull)$")


def approver_problem(value: Any) -> Optional[str]:
    """None when `value` names a person: an e-mail address or a @github-handle, not an address that reaches
    nobody by name (noreply@, donotreply@, nobody@)."""
    if isinstance(value, str) and value.startswith("@"):
        return None if _GITHUB_HANDLE.fullmatch(value) else \
            "a @github-handle (1 to 39 letters, digits and single hyphens after the @) or an e-mail address"
    if email_problem(value) is None:
        if NOBODY.fullmatch(value.rpartition("@")[0]):
            return (f"who approved it: a person's e-mail address or @github-handle, not {value.rpartition('@')[0]}@, "
                    "which by its name reaches nobody")
        return None
    return "who approved it: an e-mail address (jane@example.com) or a @github-handle"


def reason_problem(value: Any) -> Optional[str]:
    """None when `value` reads as a reason: 10 to 200 characters, no control characters, nothing marking it
    unfinished ("TODO", "tbd") and at least MIN_REASON_WORDS different words that say something (see
    reason_words: "no reason given", "to do later", "see ticket", "n/a", "asdf asdf", "abc def ghi" have none)."""
    if not isinstance(value, str) or not value.strip():
        return "a reason in words (why the guardrail does not apply here), not empty"
    text = value.strip()
    if _CONTROL.search(text):
        return "a reason in words without control characters"
    if len(text) > 200:
        return "a reason of at most 200 characters"
    words = [_root(w) for w in _WORD.findall(fold(text))]
    if any(_in(w, UNFINISHED) for w in words):
        return f"a real reason, not a placeholder ({one_line(text[:40])!r} is marked unfinished)"
    said = reason_words(text)
    if len(said) < MIN_REASON_WORDS:
        return (f"a real reason, not a placeholder: say why in at least {MIN_REASON_WORDS} words of substance "
                f"({one_line(text[:40])!r} has {len(said)}: {', '.join(said) or 'none'}; filler such as "
                "'no', 'reason', 'given', 'later', 'see ticket' does not count)")
    if len(text) < 10:
        return "a reason of at least 10 characters"
    return None


def parse_date(value: Any) -> Optional[_dt.date]:
    """A calendar date from YAML (a date) or text (YYYY-MM-DD); None when it is not one."""
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        try:
            return _dt.date.fromisoformat(value)
        except ValueError:
            return None
    return None


def today() -> _dt.date:
    return _dt.datetime.now(_dt.timezone.utc).date()


def until_problem(value: Any, on: Optional[_dt.date] = None) -> Optional[str]:
    """None when `value` is a date from today to MAX_EXCEPTION_DAYS ahead."""
    day = parse_date(value)
    on = on or today()
    if day is None:
        return f"the last day it applies, a real date written YYYY-MM-DD (not {str(value)[:40]!r})"
    if day < on:
        return f"expired on {day.isoformat()}: renew it (a new reason, approver and date) or remove the weakening"
    if (day - on).days > MAX_EXCEPTION_DAYS:
        return f"at most {MAX_EXCEPTION_DAYS} days ahead (until {day.isoformat()} is too far: review it yearly)"
    return None


def approval_problems(entry: Any, *, need_until: bool, on: Optional[_dt.date] = None) -> list[str]:
    """What is wrong with one {reason, approver[, until]} entry, as 'key: what is wanted' strings."""
    if not isinstance(entry, dict):
        return ["a mapping of reason, approver" + (" and until" if need_until else "")]
    problems = []
    for key, check in (("reason", reason_problem), ("approver", approver_problem)):
        why = check(entry.get(key))
        if why:
            problems.append(f"{key}: {why}")
    if need_until or entry.get("until") is not None:
        why = until_problem(entry.get("until"), on)
        if why:
            problems.append(f"until: {why}")
    return problems


def describe(entry: dict) -> str:
    """How an approval is listed in a verdict."""
    until = parse_date(entry.get("until"))
    return (f"reason: {str(entry.get('reason')).strip()}; approver: {entry.get('approver')}"
            + (f"; until {until.isoformat()}" if until else ""))
