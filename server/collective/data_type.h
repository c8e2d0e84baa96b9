// Element types and reduction operators of the collectives, and the 16-bit
// float conversions they need. The element types (server/base/data_type.h)
// and the conversions (server/base/float16.h) are server/base's, named here
// so collective code can say collective::DataType. Free functions;
// thread-safe.
#ifndef STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_
#define STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/data_type.h"
#include "server/base/float16.h"

namespace starling {
namespace collective {

// The one definition, with its sizes, names, parsing and kinds, lives in
// server/base/data_type.h.
using ::starling::DataType;
using ::starling::DataTypeBytes;
using ::starling::DataTypeName;
using ::starling::IsFloatingPoint;
using ::starling::ParseDataType;

// kSum, kMin, kMax, kAverage (divided by the group size), kProduct: the
// one definition, with names and parsing, is server/base/data_type.h's.
using ::starling::ParseReduceOp;
using ::starling::ReduceOp;
using ::starling::ReduceOpName;

// The 16-bit float conversions: server/base/float16.h.
using ::starling::BFloat16ToFloat;
using ::starling::BFloat16ToFloatN;
using ::starling::FloatToBFloat16;
using ::starling::FloatToBFloat16N;
using ::starling::FloatToHalf;
using ::starling::FloatToHalfN;
using ::starling::FromFloat32;
using ::starling::HalfToFloat;
using ::starling::HalfToFloatN;
using ::starling::ToFloat32;

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_
