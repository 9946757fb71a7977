// The portable kernels: baseline compiler flags, one float per "vector". Runs on any CPU.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include "isa.h"
#define TP_ISA scalar
namespace torchplug_cpu::TP_ISA {
#include "vec_scalar.h"
}
#include "isa_table.h"
TP_DEFINE_ISA_KERNELS(Scalar, scalar_kernels)
