"""The placement enforced inside a launched task: `placement bind` finds the rank and pins its device
and CPUs."""
