"""Single-feature Jinja templates for chat_template_golden.py: each line of
LINES, each of WHITESPACE (whitespace control) and each of ERRORS (syntax and
render errors) is rendered with CONTEXT by Python jinja2 and by the C++
renderer, which must agree byte for byte (or both fail)."""
CONTEXT = {"x": 5, "s": "  Hello World  ", "l": [3, 1, 2], "d": {"b": 1, "a": [1, 2], "c": {"k": None}},
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "bye", "extra": True}],
       "f": 2.5, "n": None, "t": True, "u8": "héllo wörld 中文😀", "e": "", "big": 18446744073709551615}
LINES_TEXT = r'''
{{ 1 + 2 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}
{{ 'a' ~ 1 ~ none ~ true ~ undefined_thing }}|{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ [1,2] + [3] }}|{{ (1,) }}|{{ (1, 'a') }}|{{ {'a': 1, 2: [none, true]} }}
{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 1_000 }}|{{ 3.0e-5 }}|{{ 100000000000000000.0 }}|{{ -0.0 }}|{{ 1/3 }}
{{ "a\nb\t\x41\u00e9\\q" }}|{{ 'it''s' }}|{{ "x" 'y' }}|{{ '\'' }}|{{ "\"" }}|{{ ['it\'s', "q\"", 'both\'"'] }}
{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' Hd') }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}
{{ s.startswith('  H') }}|{{ s.endswith(('x', '  ')) }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello wORLD 1st'.title() }}|{{ 'aaa'.replace('a', 'b', 2) }}
{{ d.get('a') }}|{{ d.get('zz', 7) }}|{{ d.get('zz') }}|{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}
{{ l[0] }}|{{ l[-1] }}|{{ l[5] }}|{{ l[1:] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[-2:] }}|{{ u8[::-1] }}|{{ u8[1:4] }}|{{ u8|length }}|{{ 'abcdef'[4:1:-1] }}
{{ d.a }}|{{ d['a'][1] }}|{{ d.c.k }}|{{ d.zz }}|{{ d.zz is defined }}|{{ d.a.0 }}|{{ msgs[0].role }}|{{ msgs[1]['content'] }}
{{ x if x > 3 else 'small' }}|{{ 'y' if n }}|{{ x > 3 and x < 10 }}|{{ n or 'dflt' }}|{{ e and 'no' }}|{{ not x }}|{{ 1 < 2 < 3 }}|{{ 3 in l }}|{{ 9 not in l }}|{{ 'ell' in s }}|{{ 'a' in d }}
{{ x is defined }}|{{ y is undefined }}|{{ n is none }}|{{ s is string }}|{{ d is mapping }}|{{ l is iterable }}|{{ l is sequence }}|{{ x is number }}|{{ x is integer }}|{{ f is float }}|{{ t is boolean }}|{{ t is true }}|{{ t is false }}|{{ x is even }}|{{ x is odd }}|{{ 9 is divisibleby 3 }}|{{ x is not none }}|{{ 5 is equalto 5 }}|{{ n is not string }}
{{ s|trim }}|{{ l|length }}|{{ d|count }}|{{ l|join('-') }}|{{ msgs|map(attribute='role')|join(',') }}|{{ d|items|list }}|{{ s|upper }}|{{ s|lower }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'hello-world (foo) bar'|title }}
{{ s|replace('l', 'L') }}|{{ 42|string }}|{{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'zz'|int(7) }}|{{ '2.5'|float }}|{{ 3|float }}|{{ l|first }}|{{ l|last }}|{{ 'abc'|list }}|{{ y|default('D') }}|{{ e|default('E', true) }}|{{ e|d('F') }}
{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}|{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|{{ msgs|selectattr('extra', 'defined')|list|length }}|{{ [1, none, 2]|reject('none')|list }}|{{ [1,2,3,4]|select('even')|list }}|{{ [0, 1, '', 'a']|select|list }}
{{ [3,1,2]|sort }}|{{ ['b','A','c']|sort }}|{{ [1,2,1,3]|unique|list }}|{{ l|max }}|{{ l|min }}|{{ l|sum }}|{{ [1,2]|reverse|list }}|{{ 'abc'|reverse }}|{{ -3|abs }}|{{ ['a','b']|map('upper')|list }}
{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ u8|tojson }}|{{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ [1, 2.0, 'x']|tojson(separators=(',', ':')) }}|{{ "\n\t\"\\\x01"|tojson }}|{{ u8|tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=4) }}
{{ "line1\nline2\n\nline4"|indent(2) }}|{{ "a\nb"|indent(2, true) }}|{{ "a\n\nb"|indent(2, blank=true) }}|{{ '<a href="x">&'|escape }}
{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }};{% endfor %}
{% for i in l if i > 1 %}{{ i }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for c in 'ab' %}{{ c }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}
{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}|{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}
{% set ns = namespace(a=1, b='x') %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}|{% set y = 1 %}{% for i in l %}{% set y = y + i %}{% endfor %}{{ y }}|{% if true %}{% set z = 3 %}{% endif %}{{ z }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set q %}block {{ x }}{% endset %}{{ q }}|{% set r | upper %}up{% endset %}{{ r }}
{% macro m(a, b=2, c='c') %}[{{ a }},{{ b }},{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='z') }}{{ m() }}|{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inner {{ x }}{% endcall %}|{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}
{% filter upper %}shout {{ x }}{% endfilter %}|{% with p = 5, q2 = 6 %}{{ p + q2 }}{% endwith %}{{ p }}|{% raw %}{{ not rendered }}{% endraw %}|{# comment #}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%H:%M %Z|%z|%f|%%Z|100%%') }}|{% generation %}gen{% endgeneration %}
{{ [1, 'a', none, true, 2.5, (1, 2), {'k': 'v'}] }}|{{ n }}|{{ t }}|{{ u8 }}|{{ ['a\u200b', 'é', '😀', '\x7f'] }}|{{ x|string ~ 'a' }}|{{ 'x' if 0 else 'y' if '' else 'z' }}|{{ ('a', 'b')|join }}|{{ (l|list)[0] }}
{{ 2 ** 100 }}|{{ 99999999999999999999 + 1 }}|{{ (2**70) // 3 }}|{{ (2**70) // -3 }}|{{ -(2**64) % 7 }}|{{ -(2**70) % -3 }}|{{ 9223372036854775807 + 1 }}|{{ -(-9223372036854775807 - 1) }}|{{ 0x1_0000_0000_0000_0000 }}|{{ 2**64 == 18446744073709551616.0 }}|{{ 9007199254740993 == 9007199254740992.0 }}|{{ 10**30 > 10**29 }}|{{ (2**1100) / (2**1099) }}|{{ (10**30 + 1) / 3 }}|{{ big + 1 }}|{{ big|tojson }}|{{ x ** 30 }}|{{ f * 2**64 }}
{{ (2**80)|string|length }}|{{ [2**65, 1]|max }}|{{ (2**65)|tojson }}|{{ (2**65)|float }}|{{ (2**64)|int }}|{{ (-(2**64))|abs }}|{{ [2**64, 2**64]|sum }}|{{ range(2**70, 2**70+2)|list }}|{{ {2**64: 'k'}[18446744073709551616.0] }}|{{ (2**64) is divisibleby (2**32) }}|{{ (2**64+1) is odd }}|{{ [1,2,3][2**70:] }}|{{ [2**64, 3, -(2**65)]|sort }}|{{ '%d|%x|%#o|%+30d'|format(2**70, -(2**70), 2**70, 2**70) }}|{{ '%d' % (2**70) }}|{{ (2**70)|round(-5) }}|{{ 2.675|round(2) }}|{{ 2.5|round }}|{{ 17|round(-1, 'floor') }}|{{ '99999999999999999999'|int }}|{{ '1e30'|int }}
{{ '%s' }}|{{ d|length }}|{{ 'abc'.find('c') }}|{{ 'banana'.count('a') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\nb'.splitlines() }}|{{ '12'.isdigit() }}|{{ l.index(2) }}|{{ y|length }}|{{ y|list }}
'''
WHITESPACE = ["  {% if true %}\n  yes\n  {% endif %}\n  done", "{%- if true -%}\n  x  \n{%- endif -%}\n  y", "a  {{- ' b ' -}}  c", "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n",
      "  {#- comment #}\nz", "x\n  {# c #}\n  y", "{%+ if true %}\n  a{% endif %}", "  {% raw %} r {% endraw %}\nq", "line\n    {%- if true %}\nq{% endif %}", "a\n{% if true %}\nb\n{% endif %}\nc\n",
      "{% if true %}  \n x{% endif %}", "\r\nA\r\n{% if true %}\r\nB\r\n{% endif %}\r\n", "{{ 'a' }}\n{{ 'b' }}\n", "{% set x = 1 +%}\nkeep", "   {{ 1 }} \n  {% if 1 %}k{% endif %}  \n"]
ERRORS = ["{{ x.y.z }}", "{{ undefined_var.attr }}", "{{ 1 + 'a' }}", "{{ 'a' + 1 }}", "{{ 1 / 0 }}", "{{ raise_exception('boom: bad roles') }}", "{% for %}", "{% if x %}unclosed", "{{ x", "{{ x | nosuchfilter }}",
       "{{ x is nosuchtest }}", "{% endfor %}", "{% break %}", "{{ l < 'a' }}", "{{ none() }}", "{{ undefined_fn() }}", "{% for i in 5 %}{% endfor %}", "{% for i in none %}{% endfor %}", "{{ (1, 2) + [3] }}", "{{ range(1000000) }}",
       "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "{{ {'a': 1}|items|list + 1 }}", "{% set a, b = [1] %}", "{% extends 'x' %}", "{{ 'abc'[::0] }}", "{# unclosed comment", "{% raw %}no end", "{{ ) }}", "{{ (1 }}", "{{ 'unterminated }}",
       "{% set x.y = 1 %}", "{{ -'a' }}", "{{ y + 1 }}", "{{ y < 1 }}", "{{ [1] | tojson(indent='  ') }}{{ y|tojson }}", "{% if %}{% endif %}", "{{ }}", "{% macro m(a=1, b) %}{% endmacro %}", "{{ 1 if }}", "{{ '%s' % 1 }}",
       "{{ (2**1100)|float }}", "{{ (2**1100) / 3 }}", "{{ 'x' * 2**70 }}", "{{ (2**70) // 0 }}", "{{ 'a'.split(None, 2**70) }}"]


def feature_cases():
    texts = LINES_TEXT.strip("\n").split("\n") + WHITESPACE + ERRORS
    return [{"template_text": t, "context": CONTEXT} for t in texts]
