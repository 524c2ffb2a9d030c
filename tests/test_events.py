"""The schema parser: valid lines, -1 as unavailable, and garbage never raises."""
import random

from zfsobs.events import Event, Parser, format_line

TXG = ("zfsobs 1 txg 437908718697 pool=ztest pid=13048 txg=5 start=437908669967 sync_ns=39510 "
       "interval_ns=16771269 dirty=0 open_ns=16794089 quiesce_ns=10470 wait_ns=17880 stime_ns=48810")


def test_parses_a_real_txg_line():
    # the line above was printed by probes/linux/txg.bt on libzpool 2.1.11 under ztest
    p = Parser()
    ev = p.parse(TXG)
    assert ev == Event("txg", 437908718697, ev.fields)
    assert ev.fields["pool"] == "ztest" and ev.fields["txg"] == 5 and ev.fields["dirty"] == 0
    assert ev.fields["sync_ns"] == 39510
    assert (p.events, p.malformed, p.ignored) == (1, 0, 0)


def test_minus_one_is_unavailable():
    ev = Parser().parse(TXG.replace("interval_ns=16771269", "interval_ns=-1"))
    assert ev.fields["interval_ns"] is None
    assert ev.get("interval_ns", 7) == 7


def test_unknown_kinds_and_fields_pass_through():
    p = Parser()
    ev = p.parse("zfsobs 1 future_thing 5 a=1 b=word")
    assert ev.kind == "future_thing" and ev.fields == {"a": 1, "b": "word"}
    assert p.unknown_kinds == 1 and p.malformed == 0
    ev = p.parse(TXG + " brand_new=3")
    assert ev.fields["brand_new"] == 3


def test_newer_schema_is_parsed_best_effort():
    p = Parser()
    assert p.parse(TXG.replace("zfsobs 1 ", "zfsobs 2 ")) is not None
    assert p.newer == 1


def test_malformed_lines_are_counted_not_raised():
    p = Parser()
    bad = ["zfsobs", "zfsobs x txg 1", "zfsobs 1 txg notanumber pool=a",
           "zfsobs 1 txg 5 pool=a txg=1 start=1",          # sync_ns missing
           "zfsobs 1 txg 5 pool=a txg=1 start=1 sync_ns=-1",  # required but unavailable
           "zfsobs 1 txg 5 novalue", "zfsobs 1 9bad 5", "zfsobs 1 txg -5 pool=a"]
    for line in bad:
        assert p.parse(line) is None, line
    assert p.malformed == len(bad) and p.events == 0
    assert p.last_malformed


def test_non_event_lines_are_ignored():
    p = Parser()
    for line in ["Attaching 8 probes...", "", "   ", "@map[1]: 3", "ERROR: something"]:
        assert p.parse(line) is None
    assert p.ignored == 3 and p.malformed == 0


def test_random_garbage_never_raises():
    rng = random.Random(42)
    p = Parser()
    alphabet = "zfsobs 1 txg=-\x00\xff\t é0123456789"
    for _ in range(5000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        if rng.random() < 0.5:
            line = "zfsobs " + line
        p.parse(line)
    assert p.events + p.malformed + p.ignored <= 5000


def test_format_line_round_trips():
    line = format_line("lost", 12, {"count": 3, "probe": "txg", "gone": None})
    ev = Parser().parse(line)
    assert ev.kind == "lost" and ev.fields == {"count": 3, "probe": "txg", "gone": None}
    assert Parser().parse(ev.line()) == ev


def test_fast_path_judges_every_line_as_the_token_rules_do():
    # Parser.parse takes common lines through events._fast; Parser._parse is the rule-by-rule path
    from zfsobs.capture import read_capture
    lines = read_capture(sorted(__import__("glob").glob("tests/data/lab-*.cap"))[-1]).lines[:3000]
    rnd = random.Random(9)
    odd = ["-1", "=5", "k=", "a=b=c", "pool=-1", "pool=-x", "vd=-01", "class=+3", "class=1_0", "class=w", "x=7"]
    mutated = []
    for line in lines[::3]:
        parts = line.split(" ")
        parts.insert(rnd.randrange(4, len(parts) + 1), rnd.choice(odd))
        mutated.append(" ".join(parts))
    for line in lines + mutated + [line.replace("zfsobs 1 ", "zfsobs 01 ") for line in lines[:50]]:
        fast, slow = Parser(), Parser()
        a, b = fast.parse(line), slow._parse(line.strip(), line.split())
        assert a == b and (a is None or list(a.fields) == list(b.fields)), line
        assert (fast.events, fast.malformed) == (slow.events, slow.malformed), line


def test_iter_sorted_is_parse_all_order_without_a_list():
    from zfsobs.events import iter_sorted
    rnd = random.Random(3)
    lines = [f"zfsobs 1 hello {rnd.randrange(50)} probe=p{i}" for i in range(400)] + ["junk", "zfsobs 1 x -3"]
    rnd.shuffle(lines)
    want = sorted(filter(None, map(Parser().parse, lines)), key=lambda ev: ev.ts)
    for chunk in (1, 7, 64, 1000):
        parser = Parser()
        assert list(iter_sorted(lines, parser, chunk)) == want
        assert (parser.events, parser.malformed, parser.ignored) == (400, 1, 1)
