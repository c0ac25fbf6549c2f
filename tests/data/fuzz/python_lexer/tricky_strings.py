x = f"{a!r:>{w}} {{b}}" + rb'\x00' + """multi
line""" \
    + u'''
'''
if (a and
    b):  # comment
	pass
  	 y = 0x1F + 1_000.5e-3j + .5 + 1.
@decorator
async def g(*args, **kw) -> None: return await h(a:=1)
class ModelNew(nn.Module): pass
"unterminated
'also
"""never closed
