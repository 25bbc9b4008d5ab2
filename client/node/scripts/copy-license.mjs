// Copies the repository's LICENSE into the package before `npm pack` (or publish), so that the
// tarball carries the licence text its package.json declares. The copy is not kept in git.
import { copyFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const from = join(here, "..", "..", "..", "LICENSE");
if (!existsSync(from)) {
  console.error(`copy-license: ${from} is missing: the package is packed from the repository, LICENSE included`);
  process.exit(1);
}
copyFileSync(from, join(here, "..", "LICENSE"));
