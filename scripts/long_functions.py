#!/usr/bin/env python3
"""Lists the functions longer than LIMIT lines (default 80) in crates/*/src, outside
`#[cfg(test)]` modules and test files (a `tests` directory, `tests.rs`, `*_tests.rs`).

A function's length runs from its `fn` line to its closing brace, found by brace depth with
comments, strings and char literals blanked out.

Usage: python3 scripts/long_functions.py [LIMIT] [REPO_ROOT]
"""
import re, sys, pathlib
LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 80
root = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else '.')
def strip(src):
    out=[];i=0;n=len(src)
    while i<n:
        c=src[i]
        if src.startswith('//',i):
            j=src.find('\n',i); j=n if j<0 else j; out.append(' '*(j-i)); i=j
        elif src.startswith('/*',i):
            j=src.find('*/',i); j=n if j<0 else j+2; out.append(re.sub(r'[^\n]',' ',src[i:j])); i=j
        elif c=='r' and re.match(r'r#*"',src[i:i+10]) and (i==0 or not (src[i-1].isalnum() or src[i-1]=='_')):
            m=re.match(r'r(#*)"',src[i:]); h=m.group(1); end='"'+h
            j=src.find(end,i+len(m.group(0))); j=n if j<0 else j+len(end)
            out.append(re.sub(r'[^\n]',' ',src[i:j])); i=j
        elif c=='"':
            j=i+1
            while j<n and src[j]!='"':
                j+= 2 if src[j]=='\\' else 1
            j+=1; out.append(re.sub(r'[^\n]',' ',src[i:j])); i=j
        elif c=="'":
            m=re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'",src[i:])
            if m: out.append(' '*len(m.group(0))); i+=len(m.group(0))
            else: out.append(c); i+=1
        else: out.append(c); i+=1
    return ''.join(out)
res=[]
for p in sorted(root.glob('crates/*/src/**/*.rs')):
    if 'tests' in p.parts or p.stem.endswith('tests') or p.stem=='tests': continue
    s=strip(p.read_text())
    lines=s.split('\n')
    # find cfg(test) mod ranges
    skip=set()
    for m in re.finditer(r'#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{',s):
        i=m.end(); d=1
        while d and i<len(s):
            d+= {'{':1,'}':-1}.get(s[i],0); i+=1
        a=s.count('\n',0,m.start()); b=s.count('\n',0,i)
        skip.update(range(a,b+1))
    for m in re.finditer(r'\bfn\s+(\w+)',s):
        ln=s.count('\n',0,m.start())
        if ln in skip: continue
        # find body start: first '{' or ';' at depth 0 of parens/angles
        i=m.end(); depth=0
        while i<len(s):
            ch=s[i]
            if ch in '([': depth+=1
            elif ch in ')]': depth-=1
            elif ch==';' and depth==0: i=-1; break
            elif ch=='{' and depth==0: break
            i+=1
        if i<0 or i>=len(s): continue
        j=i+1; d=1
        while d and j<len(s):
            d+={'{':1,'}':-1}.get(s[j],0); j+=1
        end=s.count('\n',0,j)
        length=end-ln+1
        if length>LIMIT: res.append((length,str(p),ln+1,m.group(1)))
for r in sorted(res,reverse=True): print(f"{r[0]:4d} {r[1]}:{r[2]} {r[3]}")
print(len(res),"functions over",LIMIT,"lines")
