/*
 * sm90_fmt.h — the register operand's format as the Hopper kernels number it (host and
 * device: the heuristics choose the instance, the kernels are templated on it).
 */
#ifndef MXF_SM90_FMT_H
#define MXF_SM90_FMT_H

namespace mxf_sm90 {
enum { FMT_E4M3 = 0, FMT_E5M2 = 1, FMT_E2M1 = 2 };
} /* namespace mxf_sm90 */

#endif
