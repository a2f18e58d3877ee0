// Placeholder: filled in by the QLoRA work (quant.h).
#include "host/adapt/quant.h"
