// Placeholder: filled in by the QLoRA work (qlora.h).
#include "host/adapt/qlora.h"
