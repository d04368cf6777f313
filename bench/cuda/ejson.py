#!/usr/bin/env python3
"""ejson.py DIR: the engine figures of a device call's record (its e_NAME_R.json files, device_env.sh's bj), by
variant: NAME's decode tok/s per round R and their median, % of the copy probe, the probe, graph kernels a step;
for speculative runs (a second JSON object in the file) the spec tok/s, whether the output was identical to plain,
verify ms a block and the plain tok/s of the same run."""
import collections
import glob
import json
import statistics
import sys


def main(d):
    res, spec = collections.defaultdict(list), collections.defaultdict(list)
    for f in sorted(glob.glob(d + '/e_*.json')):
        parts = open(f).read().strip().split('\n{')
        try:
            a = json.loads(parts[0])
        except ValueError as e:
            print(f, 'unreadable:', e)
            continue
        key = f.split('/e_')[1][:-5].rsplit('_', 1)[0]
        res[key].append((a['decode_tok_s'], a.get('pct_of_copy_probe'), a.get('copy_probe_gb_s'), a.get('graph_kernels')))
        if len(parts) > 1:
            b = json.loads('{' + parts[-1])
            spec[key].append((b['spec_tok_s'], b['identical'], b['ms_verify_per_block'], b['plain_tok_s']))
    for k, v in sorted(res.items()):
        print(k, [x[0] for x in v], 'median', round(statistics.median([x[0] for x in v]), 2), 'pct', [x[1] for x in v],
              'probe', v[0][2], 'kernels', v[0][3])
    for k, v in sorted(spec.items()):
        print('spec', k, '(tok/s, identical, verify ms, plain tok/s):', v)


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '.')
