# q4grp_emu.py: an emulation of q4grp.cu's index math, run on this machine (no GPU needed):
#   python3 bench/cuda/next/q4grp_emu.py
# k_q4g (one row: the lanes' coalesced loads, team_sum's exchanges) and k_q4gm's ring form (the
# cp.async copies of a block's items into a slot, the scale and bias words, the A and B fragments'
# reads, the mma's C = A B from the fragments as the PTX ISA lays them out, the xor tree's levels
# across a warp's slots and across warps), on random weight bytes and x digits. The float steps are
# kept symbolic ("step" of a (row, group, x row) onto an accumulator, "add" of two sums, pairs sorted:
# IEEE addition commutes), so the check is exact: every integer group dot equals the true one, every
# step reads its own (row, group)'s scale and bias, and the two kernels' summation trees are the same
# for every (row, x row). Cases: groups of 32 / 64 / 128, a partial last step, rows not a multiple of
# 16, 16-bit and f32 scales. Written after s23-run2 (the direct-load k_q4gm passed on the GPU; the
# ring form had no device): 0 mismatches, no assertion failed.
import random
MR=16; WARPS=8
def gof(l,wpt): return (32//wpt)*(l%wpt)+l//wpt
def case(wpt, cols, rows, nr, s16, seed):
    rnd=random.Random(seed)
    G=32*wpt; ng=cols//G; pitch=cols//2
    W=[bytes(rnd.randrange(256) for _ in range(pitch)) for _ in range(rows)]
    # x digits per (xrow, col): int8
    X=[[rnd.randrange(-127,128) for _ in range(cols)] for _ in range(nr)]
    # scales: raw element ids (row, group) -> encode as (row*ng+g) so a step names its scale
    def q(r,c):  # weight nibble at (r, c)
        b=W[r][c//2]; return (b & 15) if c%2==0 else (b>>4)
    def true_dot(r,i,g): return sum(q(r,c)*X[i][c] for c in range(g*G,(g+1)*G))
    # x staging in the word layout: even plane word w = bytes of cols 8w+0,2,4,6; odd: 1,3,5,7
    def xe(i,w): return [X[i][8*w+k] for k in (0,2,4,6)]
    def xo(i,w): return [X[i][8*w+k] for k in (1,3,5,7)]
    # ---- k_q4g: one x row at a time, RG irrelevant (per row), lane view
    nsteps=(ng+31)//32; sbytes=512*wpt
    def k_q4g(r, i):
        acc=['0']*32
        for st in range(nsteps):
            parts=[[0]*wpt for _ in range(32)]
            for lane in range(32):
                for m in range(wpt):
                    o=st*sbytes+512*m+16*lane
                    oc=o if o<pitch else 0
                    ch=oc>>4  # chunk of 32 cols; words 4ch..4ch+3
                    bts=W[r][oc:oc+16]
                    t=0
                    for k in range(4):  # word k of the chunk: bytes 4k..4k+3 -> cols 8(4ch+k)+..
                        w=4*ch+k
                        lo=[b & 15 for b in bts[4*k:4*k+4]]; hi=[b>>4 for b in bts[4*k:4*k+4]]
                        t+=sum(a*b for a,b in zip(lo,xe(i,w)))+sum(a*b for a,b in zip(hi,xo(i,w)))
                    parts[lane][m]=t
            for lane in range(32):
                # team_sum
                if wpt==1: D=parts[lane][0]
                elif wpt==2:
                    # the partner (p' = 1 - p) sends p' ? v[0] : v[1]
                    p=lane&1; pp=1-p; D=(parts[lane][1] if p else parts[lane][0]) + (parts[lane^1][0] if pp else parts[lane^1][1])
                else:
                    def w01(l):
                        h=(l>>1)&1; ph=1-h; pl=l^2
                        w0=(parts[l][2] if h else parts[l][0]) + (parts[pl][0] if ph else parts[pl][2])
                        w1=(parts[l][3] if h else parts[l][1]) + (parts[pl][1] if ph else parts[pl][3])
                        return w0,w1
                    p=lane&1; w0,w1=w01(lane); x0,x1=w01(lane^1); pp=1-p
                    D=(w1 if p else w0) + (x0 if pp else x1)
                gi=st*32+gof(lane,wpt)
                if gi<ng:
                    assert D==true_dot(r,i,gi), ('k_q4g dot', r,i,gi)
                    acc[lane]=('step',r,gi,i,acc[lane])
        # warp_sum at lane 0: levels 16,8,4,2,1
        v=acc[:]
        for o in (16,8,4,2,1):
            v=[('add',)+tuple(sorted((repr(v[l]),repr(v[l^o])))) for l in range(32)]
        return v[0]
    # ---- k_q4gm: one block, all vbs (gridDim 1), warps x threads view
    RS=512*wpt+32; CPR=32*wpt; sw=16 if s16 else 32; lsw=4 if s16 else 5
    nvb=(rows+MR-1)//MR
    out={}
    for vb in range(nvb):
        accs={}  # (warp, g, t, j, q) -> expr
        for st in range(nsteps):
            # issue: copies of this item into a slot (bytearray) and scale words
            slot=bytearray(MR*RS); ssw=[None]*(2*MR*sw)
            r0=vb*MR
            # every thread's copies as the kernel's place/issue make them: weight chunk k of thread tid is
            # row tid//CPR + RPC k at column chunk tid % CPR; scale word k is c = tid + 256 k of [2][MR][sw]
            NC=MR*CPR//256; RPC=256//CPR; NSC=2*MR*sw//256
            for tid in range(256):
                q0=tid%CPR; woff=16*q0
                for k in range(NC):
                    r=tid//CPR+RPC*k; row=min(r0+r,rows-1)
                    o=st*sbytes
                    if o+woff<pitch: slot[r*RS+woff:r*RS+woff+16]=W[row][o+woff:o+woff+16]
                for k in range(NSC):
                    c=tid+256*k; arr=c>>(lsw+4); r=(c>>lsw)&(MR-1); qq=c&(sw-1)
                    row=min(r0+r,rows-1); e0=row*ng
                    base=(e0//2 if s16 else e0)+qq          # place(): the row's word for this thread
                    sok=2*qq if s16 else qq
                    if st*32+sok<ng:
                        wi=base+st*sw                        # issue(): + the step's words
                        ssw[c]=(arr, (2*wi,2*wi+1) if s16 else (wi,))
            for warp in range(WARPS):
                for j in range(4):
                    gl=gof(warp+8*j,wpt); gi=st*32+gl
                    if gi>=ng: continue
                    for lane in range(32):
                        g=lane>>2; t=lane&3
                        # scale raw for rows g, g+8
                        qw=(gl>>1) if s16 else gl; sh=(gl&1) if s16 else 0
                        for rr in (g,g+8):
                            for arr in (0,1):
                                word=ssw[(arr*MR+rr)*sw+qw]
                                assert word is not None, ('scale word missing', vb, st, rr, gl)
                                el=word[1][sh]
                                row=min(r0+rr,rows-1)
                                assert word[0]==arr and el==row*ng+gi, ('scale', vb, st, rr, gl, word, row*ng+gi)
                    # the mma: C[row][col] = sum over the 4 threads t and WPT mmas of the fragments
                    for rowi in range(MR):
                        for col in range(8):
                            if col>=nr: continue
                            D=0
                            for m in range(wpt):
                                for t in range(4):
                                    base=rowi*RS+gl*16*wpt+t*4*wpt+4*m
                                    wbytes=slot[base:base+4]
                                    lo=[b & 15 for b in wbytes]; hi=[b>>4 for b in wbytes]
                                    # B: x row col's words: xr = row col, word gi*4*wpt + t*wpt + m
                                    wd=gi*4*wpt+t*wpt+m
                                    D+=sum(a*b for a,b in zip(lo,xe(col,wd)))+sum(a*b for a,b in zip(hi,xo(col,wd)))
                            row=r0+rowi
                            if row<rows: assert D==true_dot(row,col,gi), ('k_q4gm dot', row,col,gi)
                            key=(warp,j,rowi,col)
                            accs[key]=('step',min(row,rows-1),gi,col,accs.get(key,'0'))
        # tree: levels 16, 8 in the warp, 4,2,1 across warps
        for rowi in range(MR):
            row=r0+rowi
            if row>=rows: continue
            for col in range(nr):
                def A(w,j): return accs.get((w,j,rowi,col),'0')
                def add(a,b): return ('add',)+tuple(sorted((repr(a),repr(b))))
                qv=[add(add(A(w,0),A(w,2)), add(A(w,1),A(w,3))) for w in range(WARPS)]
                l4=[add(qv[l],qv[l+4]) for l in range(4)]
                v=add(add(l4[0],l4[2]), add(l4[1],l4[3]))
                out[(row,col)]=v
    # compare with k_q4g for every (row, xrow)
    bad=0
    for row in range(rows):
        for i in range(nr):
            a=k_q4g(row,i); b=out[(row,i)]
            if repr(a)!=repr(b): bad+=1
    return bad
for wpt,cols,rows,nr,s16 in [(2,2560,20,4,True),(1,1024+32*8,18,3,True),(4,128*40,17,2,False),(2,64*70,33,5,False)]:
    print(wpt,cols,rows,nr,s16,'mismatches:',case(wpt,cols,rows,nr,s16,1))
