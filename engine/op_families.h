// Internal: each op family registers its schemas; register_builtin_ops() (op_schemas.cpp)
// calls them all once, the first time an op is looked up.
//
//   void register_core_ops();   // defined next to the family's schemas
#pragma once

namespace hg {

void register_builtin_ops();
void register_core_ops();  // op_schemas.cpp: the MLP path

}  // namespace hg
