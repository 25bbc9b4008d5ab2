// Marks dist/cjs as CommonJS: the package is "type": "module", so without this file Node would
// read the CommonJS build's .js files as ES modules.
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
writeFileSync(join(here, "..", "dist", "cjs", "package.json"), '{\n  "type": "commonjs"\n}\n');
